/*
 * comm_mpi.c - moeq_ep_comm over MPI (libmoeq_mpi, moeq_mpi.h): the only
 * file that includes mpi.h.  It uses libmoeq through the public API alone.
 */
#include "moeq/moeq_mpi.h"

#include <limits.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct mpi_comm {
    moeq_ep_comm pub; /* first: the handle the caller gets */
    MPI_Comm comm;
    int *ibuf; /* [4 * size]: int counts and displacements */
} mpi_comm;

static moeq_status fail(moeq_error *err, moeq_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static moeq_status fail(moeq_error *err, moeq_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->code = (int32_t)code;
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* An MPI error code as a status with MPI's own words. */
static moeq_status mpi_fail(moeq_error *err, int rc, const char *call) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", rc);
    return fail(err, MOEQ_STATUS_IO, "MPI: %s failed: %s", call, text);
}

static moeq_status mpi_alltoallv(void *user, const void *send, const int64_t *sc, const int64_t *sd,
                                 void *recv, const int64_t *rc, const int64_t *rd,
                                 moeq_error *err) {
    mpi_comm *c = user;
    const int n = c->pub.size;
    int *isc = c->ibuf, *isd = isc + n, *irc = isd + n, *ird = irc + n;
    for (int r = 0; r < n; r++) {
        if (sc[r] < 0 || sd[r] < 0 || rc[r] < 0 || rd[r] < 0 || sc[r] > INT_MAX ||
            sd[r] > INT_MAX || rc[r] > INT_MAX || rd[r] > INT_MAX) {
            /* moeq_ep_apply never passes these: it refuses such a call on
             * every rank before the exchange. */
            return fail(err, MOEQ_STATUS_LIMIT,
                        "MPI alltoallv: rank %d: a count or displacement for rank %d is outside "
                        "0..%d bytes",
                        (int)c->pub.rank, r, INT_MAX);
        }
        isc[r] = (int)sc[r];
        isd[r] = (int)sd[r];
        irc[r] = (int)rc[r];
        ird[r] = (int)rd[r];
    }
    int rc_mpi = MPI_Alltoallv(send, isc, isd, MPI_BYTE, recv, irc, ird, MPI_BYTE, c->comm);
    return rc_mpi == MPI_SUCCESS ? MOEQ_STATUS_OK : mpi_fail(err, rc_mpi, "MPI_Alltoallv");
}

static moeq_status mpi_allreduce(void *user, int32_t *vals, int32_t n, int32_t op,
                                 moeq_error *err) {
    mpi_comm *c = user;
    if (n < 0 || (op != MOEQ_EP_REDUCE_MAX && op != MOEQ_EP_REDUCE_MIN)) {
        return fail(err, MOEQ_STATUS_INVALID_ARG, "MPI allreduce: n %d, op %d", (int)n, (int)op);
    }
    int rc = MPI_Allreduce(MPI_IN_PLACE, vals, n, MPI_INT32_T,
                           op == MOEQ_EP_REDUCE_MAX ? MPI_MAX : MPI_MIN, c->comm);
    return rc == MPI_SUCCESS ? MOEQ_STATUS_OK : mpi_fail(err, rc, "MPI_Allreduce");
}

static moeq_status mpi_barrier(void *user, moeq_error *err) {
    mpi_comm *c = user;
    int rc = MPI_Barrier(c->comm);
    return rc == MPI_SUCCESS ? MOEQ_STATUS_OK : mpi_fail(err, rc, "MPI_Barrier");
}

moeq_status moeq_ep_comm_mpi_create(int32_t mpi_fortran_comm, moeq_ep_comm **out, moeq_error *err) {
    if (out) *out = NULL;
    if (!out) return fail(err, MOEQ_STATUS_INVALID_ARG, "moeq_ep_comm_mpi_create: out is NULL");
    int init = 0, fini = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fini);
    if (!init || fini) {
        return fail(err, MOEQ_STATUS_INVALID_ARG,
                    "moeq_ep_comm_mpi_create: MPI is %s; call MPI_Init first",
                    fini ? "already finalized" : "not initialized");
    }
    MPI_Comm base = MPI_Comm_f2c((MPI_Fint)mpi_fortran_comm);
    if (base == MPI_COMM_NULL) {
        return fail(err, MOEQ_STATUS_INVALID_ARG,
                    "moeq_ep_comm_mpi_create: handle %d is MPI_COMM_NULL; pass "
                    "MPI_Comm_c2f(MPI_COMM_WORLD) or another communicator's handle",
                    (int)mpi_fortran_comm);
    }
    mpi_comm *c = calloc(1, sizeof *c);
    if (!c) return fail(err, MOEQ_STATUS_NOMEM, "moeq_ep_comm_mpi_create: out of memory");
    int rc = MPI_Comm_dup(base, &c->comm);
    if (rc != MPI_SUCCESS) {
        free(c);
        return mpi_fail(err, rc, "MPI_Comm_dup");
    }
    MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    int rank = 0, size = 0;
    MPI_Comm_rank(c->comm, &rank);
    MPI_Comm_size(c->comm, &size);
    c->ibuf = calloc(4 * (size_t)size, sizeof(int));
    if (!c->ibuf) {
        MPI_Comm_free(&c->comm);
        free(c);
        return fail(err, MOEQ_STATUS_NOMEM, "moeq_ep_comm_mpi_create: out of memory");
    }
    c->pub.rank = rank;
    c->pub.size = size;
    c->pub.user_data = c;
    c->pub.alltoallv = mpi_alltoallv;
    c->pub.allreduce_i32 = mpi_allreduce;
    c->pub.barrier = mpi_barrier;
    *out = &c->pub;
    return MOEQ_STATUS_OK;
}

void moeq_ep_comm_mpi_destroy(moeq_ep_comm *comm) {
    if (!comm) return;
    mpi_comm *c = (mpi_comm *)comm;
    int fini = 0;
    MPI_Finalized(&fini);
    if (!fini) MPI_Comm_free(&c->comm);
    free(c->ibuf);
    free(c);
}

const char *moeq_ep_mpi_library_version(void) {
    static char text[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (MPI_Get_library_version(text, &len) != MPI_SUCCESS) return "unknown MPI";
    char *nl = strchr(text, '\n');
    if (nl) *nl = '\0';
    return text;
}
