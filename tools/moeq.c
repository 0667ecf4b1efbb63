/* moeq.c - the moeq command-line tool (public API only). */
#include <stdio.h>
#include <string.h>

#include "moeq/moeq.h"

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "version") == 0) {
        printf("moeq %s\n", moeq_version());
        return 0;
    }
    fprintf(stderr, "usage: moeq version\n");
    return 2;
}
