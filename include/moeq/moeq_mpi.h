/*
 * moeq_mpi.h - a moeq_ep_comm over MPI, in the optional library libmoeq_mpi
 * (built with -DMOEQ_MPI=ON or when CMake finds MPI; link moeq::moeq_mpi).
 * The core library never depends on MPI.
 *
 *     MPI_Init(&argc, &argv);
 *     moeq_ep_comm *comm;
 *     moeq_ep_comm_mpi_create(MPI_Comm_c2f(MPI_COMM_WORLD), &comm, &err);
 *     moeq_ep_create(&layer_cfg, comm, MOEQ_EP_CONTIGUOUS, &ep, &err);
 *     ...
 *     moeq_ep_destroy(ep);
 *     moeq_ep_comm_mpi_destroy(comm);
 *     MPI_Finalize();
 *
 * The MPI communicator is passed as its Fortran handle (MPI_Comm_c2f in C,
 * comm.py2f() in mpi4py), so that this header needs no mpi.h.
 */
#ifndef MOEQ_MPI_H
#define MOEQ_MPI_H

#include "moeq_ep.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Collective over the MPI communicator.  MPI must be initialised (and stay
 * so until moeq_ep_comm_mpi_destroy).  The communicator is duplicated
 * (MPI_Comm_dup) with MPI_ERRORS_RETURN, so MPI failures come back as
 * statuses (IO, with MPI's message) instead of aborting the job.  alltoallv
 * is MPI_Alltoallv of MPI_BYTE (counts and displacements must fit in an int:
 * moeq_ep_apply keeps them below 2^31 bytes), allreduce_i32 MPI_Allreduce of
 * MPI_INT32_T with MPI_MAX or MPI_MIN, barrier MPI_Barrier.
 * @return OK, INVALID_ARG (NULL out, MPI not initialised or already
 *         finalised, an invalid handle), IO (an MPI call failed), NOMEM.
 * OUT *out: destroy with moeq_ep_comm_mpi_destroy. */
MOEQ_API moeq_status moeq_ep_comm_mpi_create(int32_t mpi_fortran_comm, moeq_ep_comm **out,
                                             moeq_error *err);
/* Collective (MPI_Comm_free of the duplicate).  NULL is a no-op. */
MOEQ_API void moeq_ep_comm_mpi_destroy(moeq_ep_comm *comm);

/* The MPI library's version string (MPI_Get_library_version), for reports.
 * Static storage. */
MOEQ_API const char *moeq_ep_mpi_library_version(void);

#ifdef __cplusplus
}
#endif

#endif /* MOEQ_MPI_H */
