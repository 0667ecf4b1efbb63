# `mpirun -np N moeq run MODEL --layer P --ep PLACEMENT -o OUT --check` writes
# the same bytes as `moeq run MODEL --layer P -o OUT` (one process, every
# expert) for N = 1, 2, 4 and both placements; a layer that is not in the
# checkpoint fails every rank with exit status 1 (nobody waits).
# -DMOEQ= the tool, -DMPIEXEC= / -DNPFLAG= / -DOVERSUBSCRIBE= how to start
# ranks, -DWORK= a scratch directory.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(layer model.layers.0.mlp.experts)

function(run_ok what)
    execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
    endif()
    set(last_output "${out}" PARENT_SCOPE)
endfunction()

run_ok("moeq synth" ${MOEQ} synth wna16-int4-g128 ${WORK}/model --experts 12 --top-k 3
       --hidden 128 --intermediate 128 --layers 1)
run_ok("moeq run" ${MOEQ} run ${WORK}/model --layer ${layer} --tokens 23 --repeat 1
       --threads 1 -o ${WORK}/one.npy)
foreach(np 1 2 4)
    set(extra "")
    if(np EQUAL 4)
        set(extra ${OVERSUBSCRIBE})
    endif()
    foreach(placement contiguous round-robin)
        set(out ${WORK}/ep_${np}_${placement}.npy)
        run_ok("mpirun -np ${np} moeq run --ep ${placement}"
               ${MPIEXEC} ${NPFLAG} ${np} ${extra} ${MOEQ} run ${WORK}/model --layer ${layer}
               --tokens 23 --repeat 1 --ep ${placement} -o ${out} --check)
        if(NOT last_output MATCHES "bit-identical")
            message(FATAL_ERROR "np ${np} ${placement}: no bit-identical line:\n${last_output}")
        endif()
        if(NOT last_output MATCHES "expert parallelism over ${np} ranks")
            message(FATAL_ERROR "np ${np} ${placement}: no rank count:\n${last_output}")
        endif()
        execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${WORK}/one.npy ${out}
                        RESULT_VARIABLE same)
        if(NOT same EQUAL 0)
            message(FATAL_ERROR "np ${np} ${placement}: ${out} differs from one process's output")
        endif()
        message(STATUS "np ${np} ${placement}: the same bytes as one process")
    endforeach()
endforeach()
execute_process(COMMAND ${MPIEXEC} ${NPFLAG} 2 ${MOEQ} run ${WORK}/model --layer model.nope
                        --ep --repeat 1
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
if(rc EQUAL 0 OR NOT err MATCHES "no tensor named model.nope")
    message(FATAL_ERROR "a missing layer: exit ${rc}, expected 1 with a message:\n${out}\n${err}")
endif()
file(REMOVE_RECURSE ${WORK})
