# Installs moeq into a scratch prefix, then builds and runs small consumers
# through find_package(moeq) (shared and static) and through pkg-config.
set(prefix ${WORK}/prefix)
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${prefix}
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install failed")
endif()
# SAN_FLAGS: the sanitizer flags of the build under test ("" for none); CC: its compiler.
if(NOT CC)
    set(CC cc)
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SRC} -B ${WORK}/consumer
                        -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_C_COMPILER=${CC}
                        "-DCMAKE_C_FLAGS=${SAN_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${SAN_FLAGS}"
                        RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "find_package(moeq) failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK}/consumer RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "building against the installed package failed")
endif()
foreach(exe consumer_cmake consumer_static)
    execute_process(COMMAND ${CMAKE_COMMAND} -E env LD_LIBRARY_PATH=${prefix}/lib
                            ${WORK}/consumer/${exe} RESULT_VARIABLE rc OUTPUT_VARIABLE out)
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "${exe} failed: ${out}")
    endif()
    message(STATUS "${exe}: ${out}")
endforeach()
# pkg-config: compile and link with the flags moeq.pc gives.
file(GLOB pcdir ${prefix}/lib*/pkgconfig ${prefix}/lib/*/pkgconfig)
execute_process(COMMAND ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${pcdir}
                        pkg-config --cflags --libs moeq
                OUTPUT_VARIABLE flags RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config moeq failed")
endif()
separate_arguments(flags UNIX_COMMAND "${flags}")
separate_arguments(san UNIX_COMMAND "${SAN_FLAGS}")
execute_process(COMMAND ${CC} ${san} ${SRC}/consumer.c ${flags} -o ${WORK}/consumer_pc
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "compiling with pkg-config flags failed: ${flags}")
endif()
file(GLOB libdir ${prefix}/lib ${prefix}/lib/*-linux-gnu)
execute_process(COMMAND ${CMAKE_COMMAND} -E env LD_LIBRARY_PATH=${libdir} ${WORK}/consumer_pc
                RESULT_VARIABLE rc OUTPUT_VARIABLE out)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config consumer failed: ${out}")
endif()
message(STATUS "pkg-config consumer: ${out}")
