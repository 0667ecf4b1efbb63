/*
 * check_safetensors.c - the checkpoint reader and the .safetensors writer.
 *
 * `check_safetensors --copy IN OUT` opens IN and writes its tensors and
 * metadata to OUT; the cross-check against the safetensors package
 * (safetensors_package.py) drives it.
 */
#include "test_util.h"
#include "common/internal.h"
#include "checkpoint/safetensors.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- scratch directory ------------------------------------------------------ */

static char g_dir[64];

static void make_dir(void) {
    moeq_test_mkdtemp(g_dir, sizeof g_dir, "moeq-st");
}

static void remove_dir(void) {
    moeq_test_rmtree(g_dir);
}

static const char *in_dir(const char *name, char *buf, size_t size) {
    snprintf(buf, size, "%s/%s", g_dir, name);
    return buf;
}

/* A .safetensors image: the 8-byte length `len_field`, the header bytes and
 * `data_len` bytes of data (i & 0xff). */
static unsigned char *st_image(uint64_t len_field, const char *header, size_t header_size,
                               size_t data_len, size_t *out_n) {
    size_t n = 8 + header_size + data_len;
    unsigned char *buf = malloc(n ? n : 1);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(len_field >> (8 * i));
    memcpy(buf + 8, header, header_size);
    for (size_t i = 0; i < data_len; i++) buf[8 + header_size + i] = (unsigned char)i;
    *out_n = n;
    return buf;
}

/* Writes a valid file holding `header` (its length taken from it) and data. */
static void write_st(const char *path, const char *header, size_t data_len) {
    size_t n;
    unsigned char *buf = st_image(strlen(header), header, strlen(header), data_len, &n);
    moeq_test_write_file(path, buf, n);
    free(buf);
}

/* ---- round trips ----------------------------------------------------------------- */

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(seed * 31u + i * 7u + 1u);
}

/* One tensor of every dtype ([2, 3]), a scalar, an empty tensor, each with its
 * own bytes; the writer must lay them out so that every one is aligned. */
START_TEST(test_round_trip_every_dtype) {
    enum { N = MOEQ_DTYPE_COUNT_ - 1 + 2 };
    moeq_tensor t[N];
    unsigned char *bufs[N];
    char names[N][32];
    memset(t, 0, sizeof t);
    for (int i = 0; i < N; i++) {
        moeq_tensor *x = &t[i];
        if (i < MOEQ_DTYPE_COUNT_ - 1) {
            x->dtype = i + 1;
            snprintf(names[i], sizeof names[i], "layer.%s.weight", moeq_dtype_name(i + 1));
            x->ndim = 2;
            x->shape[0] = 2;
            x->shape[1] = 3;
        } else if (i == N - 2) {
            x->dtype = MOEQ_DTYPE_F32;
            snprintf(names[i], sizeof names[i], "scalar");
            x->ndim = 0;
        } else {
            x->dtype = MOEQ_DTYPE_BF16;
            snprintf(names[i], sizeof names[i], "empty");
            x->ndim = 2;
            x->shape[0] = 0;
            x->shape[1] = 4;
        }
        x->name = names[i];
        uint64_t elems = 1;
        for (int d = 0; d < x->ndim; d++) elems *= (uint64_t)x->shape[d];
        x->nbytes = elems * moeq_dtype_size(x->dtype);
        bufs[i] = malloc(x->nbytes ? x->nbytes : 1);
        fill(bufs[i], x->nbytes, (unsigned)i);
        x->data = x->nbytes ? bufs[i] : NULL;
    }
    char path[128];
    in_dir("all.safetensors", path, sizeof path);
    moeq_error err;
    ck_assert_ok(
        moeq_safetensors_write(path, t, N, "{\"format\":\"pt\",\"note\":\"\\u00e9\"}", &err), &err);
    char tmp[140];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    ck_assert_int_ne(access(tmp, F_OK), 0);

    moeq_checkpoint *ck = NULL;
    ck_assert_ok(moeq_checkpoint_open(path, &ck, &err), &err);
    ck_assert_uint_eq(moeq_checkpoint_tensor_count(ck), N);
    for (int i = 0; i < N; i++) {
        moeq_tensor got;
        ck_assert_ok(moeq_checkpoint_find(ck, t[i].name, &got), &err);
        ck_assert_str_eq(got.name, t[i].name);
        ck_assert_int_eq(got.dtype, t[i].dtype);
        ck_assert_int_eq(got.ndim, t[i].ndim);
        for (int d = 0; d < got.ndim; d++) ck_assert_int_eq(got.shape[d], t[i].shape[d]);
        ck_assert_uint_eq(got.nbytes, t[i].nbytes);
        ck_assert_str_eq(got.file, path);
        ck_assert_int_eq(memcmp(got.data, bufs[i], t[i].nbytes), 0);
        ck_assert_uint_eq((uintptr_t)got.data % moeq_dtype_size(got.dtype), 0);
    }
    ck_assert_uint_eq(moeq__checkpoint_metadata_count(ck, 0), 2);
    const char *key, *value;
    ck_assert(moeq__checkpoint_metadata_pair(ck, 0, 1, &key, &value));
    ck_assert_str_eq(key, "note");
    ck_assert_str_eq(value, "\xc3\xa9");
    ck_assert(!moeq__checkpoint_metadata_pair(ck, 0, 2, &key, &value));
    moeq_checkpoint_close(ck);
    for (int i = 0; i < N; i++) free(bufs[i]);
}
END_TEST

/* The exact bytes the safetensors package (0.8) writes for the same tensors:
 * save_file({"a": f32[2,3], "b": u8[3], "c": f64[1], "aa": i16[2]},
 *           metadata={"format": "np"}). */
START_TEST(test_writer_matches_safetensors_package) {
    static const char want[] = "{\"__metadata__\":{\"format\":\"np\"},"
                               "\"c\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]},"
                               "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[8,32]},"
                               "\"aa\":{\"dtype\":\"I16\",\"shape\":[2],\"data_offsets\":[32,36]},"
                               "\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[36,39]}}";
    unsigned char a[24], b[3], c[8], aa[4];
    fill(a, sizeof a, 1);
    fill(b, sizeof b, 2);
    fill(c, sizeof c, 3);
    fill(aa, sizeof aa, 4);
    moeq_tensor t[4] = {
        {.name = "a", .dtype = MOEQ_DTYPE_F32, .ndim = 2, .shape = {2, 3}, .data = a, .nbytes = 24},
        {.name = "b", .dtype = MOEQ_DTYPE_U8, .ndim = 1, .shape = {3}, .data = b, .nbytes = 3},
        {.name = "c", .dtype = MOEQ_DTYPE_F64, .ndim = 1, .shape = {1}, .data = c, .nbytes = 8},
        {.name = "aa", .dtype = MOEQ_DTYPE_I16, .ndim = 1, .shape = {2}, .data = aa, .nbytes = 4},
    };
    char path[128];
    in_dir("pkg.safetensors", path, sizeof path);
    moeq_error err;
    ck_assert_ok(moeq_safetensors_write(path, t, 4, "{\"format\": \"np\"}", &err), &err);
    size_t n;
    unsigned char *got = moeq_test_read_file(path, &n);
    size_t hlen = strlen(want);
    size_t padded = (hlen + 7) / 8 * 8;
    ck_assert_uint_eq(n, 8 + padded + 39);
    ck_assert_uint_eq(got[0] | (got[1] << 8), padded);
    ck_assert_int_eq(memcmp(got + 8, want, hlen), 0);
    for (size_t i = hlen; i < padded; i++) ck_assert_int_eq(got[8 + i], ' ');
    const unsigned char *data = got + 8 + padded;
    ck_assert_int_eq(memcmp(data, c, 8), 0);
    ck_assert_int_eq(memcmp(data + 8, a, 24), 0);
    ck_assert_int_eq(memcmp(data + 32, aa, 4), 0);
    ck_assert_int_eq(memcmp(data + 36, b, 3), 0);
    free(got);

    /* No tensors and no metadata: "{}" padded to 8 bytes, as the package does. */
    ck_assert_ok(moeq_safetensors_write(path, NULL, 0, NULL, &err), &err);
    got = moeq_test_read_file(path, &n);
    ck_assert_uint_eq(n, 16);
    ck_assert_int_eq(memcmp(got, "\x08\0\0\0\0\0\0\0{}      ", 16), 0);
    free(got);
    moeq_checkpoint *ck;
    ck_assert_ok(moeq_checkpoint_open(path, &ck, &err), &err);
    ck_assert_uint_eq(moeq_checkpoint_tensor_count(ck), 0);
    moeq_checkpoint_close(ck);
}
END_TEST

START_TEST(test_name_order_and_lookup) {
    char path[128];
    in_dir("m.safetensors", path, sizeof path);
    /* Header order, data order and name order all differ. */
    static const char header[] =
        "{\"zeta\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
        "\"a.b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[4,5]},"
        "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]},"
        "\"a.c\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[5,5]},"
        "\"b\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[5,6]},"
        "\"__metadata__\":{\"format\":\"pt\"}}  ";
    write_st(path, header, 6);
    moeq_checkpoint *ck;
    moeq_error err;
    ck_assert_ok(moeq_checkpoint_open(path, &ck, &err), &err);
    static const char *const order[] = {"a", "a.b", "a.c", "b", "zeta"};
    ck_assert_uint_eq(moeq_checkpoint_tensor_count(ck), 5);
    for (uint64_t i = 0; i < 5; i++) {
        moeq_tensor t;
        ck_assert_ok(moeq_checkpoint_tensor(ck, i, &t), &err);
        ck_assert_str_eq(t.name, order[i]);
        ck_assert_ptr_eq(moeq__checkpoint_tensor_at(ck, i)->name, t.name);
    }
    moeq_tensor t;
    ck_assert_int_eq(moeq_checkpoint_tensor(ck, 5, &t), MOEQ_STATUS_INVALID_ARG);
    ck_assert_ptr_null(moeq__checkpoint_tensor_at(ck, 5));
    ck_assert_ok(moeq_checkpoint_find(ck, "a", &t), &err);
    ck_assert_uint_eq(((const unsigned char *)t.data)[0], 2);
    ck_assert_int_eq(t.ndim, 1);
    ck_assert_ok(moeq_checkpoint_find(ck, "b", &t), &err);
    ck_assert_int_eq(t.ndim, 0);
    ck_assert_uint_eq(t.nbytes, 1);
    ck_assert_int_eq(moeq_checkpoint_find(ck, "a.d", &t), MOEQ_STATUS_NO_MATCH);
    ck_assert_int_eq(moeq_checkpoint_find(ck, "", &t), MOEQ_STATUS_NO_MATCH);
    ck_assert_int_eq(moeq_checkpoint_find(ck, "zeta2", &t), MOEQ_STATUS_NO_MATCH);
    ck_assert_int_eq(moeq_checkpoint_find(ck, NULL, &t), MOEQ_STATUS_INVALID_ARG);
    ck_assert_int_eq(moeq_checkpoint_find(NULL, "a", &t), MOEQ_STATUS_INVALID_ARG);

    uint64_t first, i;
    /* "<module>.*": a's children, not a itself */
    ck_assert_uint_eq(moeq__checkpoint_module_range(ck, "a", &first), 2);
    ck_assert_uint_eq(first, 1);
    ck_assert_uint_eq(moeq__checkpoint_module_range(ck, "b", &first), 0);
    ck_assert_uint_eq(first, 4);
    ck_assert_uint_eq(moeq__checkpoint_module_range(ck, "", &first), 0);
    ck_assert_uint_eq(first, 0);
    ck_assert_uint_eq(moeq__checkpoint_module_range(ck, "c", &first), 0);
    ck_assert_uint_eq(first, 4);
    ck_assert_uint_eq(moeq__checkpoint_module_range(ck, "zet", &first), 0);
    ck_assert_uint_eq(first, 4);
    ck_assert(moeq__checkpoint_index_of(ck, "zeta", &i));
    ck_assert_uint_eq(i, 4);
    ck_assert(!moeq__checkpoint_index_of(ck, "zet", &i));

    ck_assert_uint_eq(moeq__checkpoint_file_count(ck), 1);
    ck_assert_str_eq(moeq__checkpoint_file_path(ck, 0), path);
    ck_assert_ptr_null(moeq__checkpoint_file_path(ck, 1));
    ck_assert_uint_eq(moeq__checkpoint_file_size(ck, 0), 8 + strlen(header) + 6);
    ck_assert_uint_eq(moeq__checkpoint_file_size(ck, 1), 0);
    moeq_checkpoint_close(ck);
    moeq_checkpoint_close(NULL);
    ck_assert_uint_eq(moeq_checkpoint_tensor_count(NULL), 0);
}
END_TEST

/* Many tensors: lookup of every name, and of names that are absent. */
START_TEST(test_many_tensors) {
    enum { N = 5000 };
    moeq_tensor *t = calloc(N, sizeof *t);
    char(*names)[48] = calloc(N, sizeof *names);
    int32_t *vals = calloc(N, sizeof *vals);
    for (int i = 0; i < N; i++) {
        /* Not in name order, so the writer and the reader must both sort. */
        int k = (i * 7919) % N;
        snprintf(names[i], sizeof names[i], "model.layers.%d.mlp.experts.%d.w", k / 64, k % 64);
        vals[i] = k;
        t[i] = (moeq_tensor){.name = names[i],
                             .dtype = MOEQ_DTYPE_I32,
                             .ndim = 1,
                             .shape = {1},
                             .data = &vals[i],
                             .nbytes = 4};
    }
    char path[128];
    in_dir("many.safetensors", path, sizeof path);
    moeq_error err;
    ck_assert_ok(moeq_safetensors_write(path, t, N, NULL, &err), &err);
    moeq_checkpoint *ck;
    ck_assert_ok(moeq_checkpoint_open(path, &ck, &err), &err);
    ck_assert_uint_eq(moeq_checkpoint_tensor_count(ck), N);
    for (int i = 0; i < N; i++) {
        moeq_tensor got;
        ck_assert_ok(moeq_checkpoint_find(ck, names[i], &got), &err);
        ck_assert_int_eq(*(const int32_t *)got.data, vals[i]);
    }
    for (uint64_t i = 1; i < N; i++) {
        ck_assert_int_lt(strcmp(moeq__checkpoint_tensor_at(ck, i - 1)->name,
                                moeq__checkpoint_tensor_at(ck, i)->name),
                         0);
    }
    moeq_tensor got;
    ck_assert_int_eq(moeq_checkpoint_find(ck, "model.layers.3.mlp.experts.64.w", &got),
                     MOEQ_STATUS_NO_MATCH);
    uint64_t first;
    ck_assert_uint_eq(moeq__checkpoint_module_range(ck, "model.layers.3.mlp.experts", &first), 64);
    moeq_checkpoint_close(ck);
    free(t);
    free(names);
    free(vals);
}
END_TEST

/* ---- sharded checkpoints and directories ------------------------------------------ */

static void write_one(const char *name, const char *tensor, int32_t value) {
    char path[128];
    moeq_tensor t = {.name = tensor,
                     .dtype = MOEQ_DTYPE_I32,
                     .ndim = 1,
                     .shape = {1},
                     .data = &value,
                     .nbytes = 4};
    moeq_error err;
    ck_assert_ok(moeq_safetensors_write(in_dir(name, path, sizeof path), &t, 1, NULL, &err), &err);
}

static void write_text(const char *name, const char *text) {
    char path[128];
    moeq_test_write_file(in_dir(name, path, sizeof path), text, strlen(text));
}

static int32_t value_of(const moeq_checkpoint *ck, const char *name) {
    moeq_tensor t;
    moeq_error err;
    ck_assert_ok(moeq_checkpoint_find(ck, name, &t), &err);
    return *(const int32_t *)t.data;
}

static int g_warnings;
static char g_last_warning[1024];
static void on_log(int32_t level, const char *msg, void *user) {
    (void)user;
    if (level != MOEQ_LOG_WARN) return;
    g_warnings++;
    snprintf(g_last_warning, sizeof g_last_warning, "%s", msg);
}

START_TEST(test_sharded_index) {
    /* Two shards of two tensors each, written with the writer. */
    char path[128];
    int32_t v[4] = {10, 11, 20, 21};
    moeq_tensor s1[2] = {
        {.name = "w.a",
         .dtype = MOEQ_DTYPE_I32,
         .ndim = 1,
         .shape = {1},
         .data = &v[0],
         .nbytes = 4},
        {.name = "w.c",
         .dtype = MOEQ_DTYPE_I32,
         .ndim = 1,
         .shape = {1},
         .data = &v[1],
         .nbytes = 4},
    };
    moeq_tensor s2[2] = {
        {.name = "w.b",
         .dtype = MOEQ_DTYPE_I32,
         .ndim = 1,
         .shape = {1},
         .data = &v[2],
         .nbytes = 4},
        {.name = "w.d",
         .dtype = MOEQ_DTYPE_I32,
         .ndim = 1,
         .shape = {1},
         .data = &v[3],
         .nbytes = 4},
    };
    moeq_error err;
    ck_assert_ok(
        moeq_safetensors_write(in_dir("model-00001-of-00002.safetensors", path, sizeof path), s1, 2,
                               NULL, &err),
        &err);
    ck_assert_ok(
        moeq_safetensors_write(in_dir("model-00002-of-00002.safetensors", path, sizeof path), s2, 2,
                               NULL, &err),
        &err);
    write_text("model.safetensors.index.json",
               "{\"metadata\": {\"total_size\": 16},\n \"weight_map\": {\n"
               "  \"w.d\": \"model-00002-of-00002.safetensors\",\n"
               "  \"w.a\": \"model-00001-of-00002.safetensors\",\n"
               "  \"w.b\": \"model-00002-of-00002.safetensors\",\n"
               "  \"w.c\": \"model-00001-of-00002.safetensors\"}}\n");
    /* A stray file the index does not name is not opened. */
    write_one("stray.safetensors", "w.a", 99);

    const char *targets[2] = {g_dir, NULL};
    char index[128];
    targets[1] = in_dir("model.safetensors.index.json", index, sizeof index);
    for (int k = 0; k < 2; k++) {
        moeq_checkpoint *ck;
        ck_assert_ok(moeq_checkpoint_open(targets[k], &ck, &err), &err);
        ck_assert_uint_eq(moeq_checkpoint_tensor_count(ck), 4);
        ck_assert_uint_eq(moeq__checkpoint_file_count(ck), 2);
        ck_assert_int_eq(value_of(ck, "w.a"), 10);
        ck_assert_int_eq(value_of(ck, "w.b"), 20);
        ck_assert_int_eq(value_of(ck, "w.c"), 11);
        ck_assert_int_eq(value_of(ck, "w.d"), 21);
        moeq_tensor t;
        ck_assert_ok(moeq_checkpoint_find(ck, "w.b", &t), &err);
        ck_assert_ptr_eq(t.file, moeq__checkpoint_file_path(ck, 1));
        ck_assert_ptr_nonnull(strstr(t.file, "model-00002-of-00002.safetensors"));
        moeq_checkpoint_close(ck);
    }

    /* A tensor the shards hold but weight_map does not list: kept, with a warning. */
    write_text("model.safetensors.index.json",
               "{\"weight_map\": {\"w.a\": \"model-00001-of-00002.safetensors\","
               " \"w.b\": \"model-00002-of-00002.safetensors\"}}");
    g_warnings = 0;
    moeq_set_log_callback(on_log, NULL);
    moeq_checkpoint *ck;
    ck_assert_ok(moeq_checkpoint_open(g_dir, &ck, &err), &err);
    moeq_set_log_callback(NULL, NULL);
    ck_assert_uint_eq(moeq_checkpoint_tensor_count(ck), 4);
    ck_assert_int_eq(value_of(ck, "w.d"), 21);
    ck_assert_int_eq(g_warnings, 1);
    ck_assert_ptr_nonnull(strstr(g_last_warning, "2 tensors that weight_map does not list"));
    ck_assert_ptr_nonnull(strstr(g_last_warning, "'w.c'"));
    moeq_checkpoint_close(ck);
}
END_TEST

START_TEST(test_directory_open) {
    moeq_checkpoint *ck;
    moeq_error err;
    /* Empty directory. */
    ck_assert_status(moeq_checkpoint_open(g_dir, &ck, &err), MOEQ_STATUS_CHECKPOINT, &err);
    ck_assert_ptr_null(ck);
    ck_assert_ptr_nonnull(strstr(err.message, "no model.safetensors.index.json"));
    ck_assert_ptr_nonnull(strstr(err.message, g_dir));

    /* No index, no model.safetensors: every *.safetensors file, in name order. */
    write_one("b.safetensors", "t.b", 2);
    write_one("a.safetensors", "t.a", 1);
    write_text("notes.txt", "not a checkpoint");
    char sub[128];
    mkdir(in_dir("dir.safetensors", sub, sizeof sub), 0700);
    ck_assert_ok(moeq_checkpoint_open(g_dir, &ck, &err), &err);
    ck_assert_uint_eq(moeq__checkpoint_file_count(ck), 2);
    ck_assert_ptr_nonnull(strstr(moeq__checkpoint_file_path(ck, 0), "/a.safetensors"));
    ck_assert_ptr_nonnull(strstr(moeq__checkpoint_file_path(ck, 1), "/b.safetensors"));
    ck_assert_int_eq(value_of(ck, "t.a"), 1);
    ck_assert_int_eq(value_of(ck, "t.b"), 2);
    moeq_checkpoint_close(ck);

    /* model.safetensors wins over the other files. */
    write_one("model.safetensors", "t.m", 3);
    ck_assert_ok(moeq_checkpoint_open(g_dir, &ck, &err), &err);
    ck_assert_uint_eq(moeq_checkpoint_tensor_count(ck), 1);
    ck_assert_int_eq(value_of(ck, "t.m"), 3);
    moeq_checkpoint_close(ck);

    /* ... and the index over model.safetensors. */
    write_text("model.safetensors.index.json", "{\"weight_map\": {\"t.b\": \"b.safetensors\"}}");
    ck_assert_ok(moeq_checkpoint_open(g_dir, &ck, &err), &err);
    ck_assert_uint_eq(moeq_checkpoint_tensor_count(ck), 1);
    ck_assert_int_eq(value_of(ck, "t.b"), 2);
    moeq_checkpoint_close(ck);

    /* A trailing slash changes nothing. */
    char slash[128];
    snprintf(slash, sizeof slash, "%s/", g_dir);
    ck_assert_ok(moeq_checkpoint_open(slash, &ck, &err), &err);
    char want[160];
    ck_assert_str_eq(moeq__checkpoint_file_path(ck, 0), in_dir("b.safetensors", want, sizeof want));
    moeq_checkpoint_close(ck);
}
END_TEST

START_TEST(test_open_arguments) {
    moeq_checkpoint *ck = (moeq_checkpoint *)&ck;
    moeq_error err;
    ck_assert_status(moeq_checkpoint_open(NULL, &ck, &err), MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_ptr_null(ck);
    ck_assert_status(moeq_checkpoint_open(g_dir, NULL, &err), MOEQ_STATUS_INVALID_ARG, &err);
    char path[128];
    in_dir("absent.safetensors", path, sizeof path);
    ck_assert_status(moeq_checkpoint_open(path, &ck, &err), MOEQ_STATUS_IO, &err);
    ck_assert_ptr_nonnull(strstr(err.message, path));
    ck_assert_status(moeq_checkpoint_open(path, &ck, NULL), MOEQ_STATUS_IO, NULL);
}
END_TEST

/* ---- corrupt files --------------------------------------------------------------- */

#define AUTO UINT64_MAX

typedef struct corrupt_case {
    const char *label;
    const char *header; /* NULL: the file is `size` bytes of pattern */
    size_t size;        /* header bytes (0: strlen), or the whole file when header is NULL */
    uint64_t len_field; /* the header length written; AUTO: the header's own */
    size_t data_len;
    int status;
    const char *want; /* a substring of the message (the path is checked too) */
} corrupt_case;

#define E(body) "{\"t\":{" body "}}"
#define F32x2   "\"dtype\":\"F32\",\"shape\":[2]"

static const corrupt_case k_corrupt[] = {
    {"empty file", NULL, 0, 0, 0, MOEQ_STATUS_CHECKPOINT, "0 bytes long, too short"},
    {"7 bytes", NULL, 7, 0, 0, MOEQ_STATUS_CHECKPOINT, "7 bytes long, too short"},
    {"header length past the end", "{}", 0, 100, 0, MOEQ_STATUS_CHECKPOINT,
     "header length 100 runs past the end of the file (10 bytes)"},
    {"header length huge", "{}", 0, (uint64_t)1 << 40, 0, MOEQ_STATUS_CHECKPOINT,
     "header length 1099511627776 exceeds the limit"},
    {"header length 2^64-1", "{}", 0, UINT64_MAX - 1, 0, MOEQ_STATUS_CHECKPOINT,
     "exceeds the limit"},
    {"header length 0", "{}", 0, 0, 0, MOEQ_STATUS_CHECKPOINT, "header length 0 is below"},
    {"header length 1", "{}", 0, 1, 0, MOEQ_STATUS_CHECKPOINT, "header length 1 is below"},
    {"header not JSON", "{nope}", 0, AUTO, 0, MOEQ_STATUS_CHECKPOINT,
     "header is not valid JSON (error near byte "},
    {"header an array", "[]      ", 0, AUTO, 0, MOEQ_STATUS_CHECKPOINT,
     "header is a JSON array, not an object"},
    {"header a string", "\"x\"", 0, AUTO, 0, MOEQ_STATUS_CHECKPOINT, "header is a JSON string"},
    {"bytes after the object", "{} x", 0, AUTO, 0, MOEQ_STATUS_CHECKPOINT,
     "bytes after the JSON object (byte 3)"},
    {"NUL in the header", "{\"a\0\":1}", 8, AUTO, 0, MOEQ_STATUS_CHECKPOINT,
     "NUL byte at offset 3"},
    {"header not UTF-8", "{\"\xc0\xaf\":{}}", 0, AUTO, 0, MOEQ_STATUS_CHECKPOINT,
     "not valid UTF-8 (byte 2"},
    {"entry not an object", "{\"t\":5}", 0, AUTO, 0, MOEQ_STATUS_CHECKPOINT,
     "tensor 't': entry is a JSON number"},
    {"entry missing dtype", E("\"shape\":[2],\"data_offsets\":[0,8]"), 0, AUTO, 8,
     MOEQ_STATUS_CHECKPOINT, "tensor 't': entry has no 'dtype'"},
    {"entry missing shape", E("\"dtype\":\"F32\",\"data_offsets\":[0,8]"), 0, AUTO, 8,
     MOEQ_STATUS_CHECKPOINT, "tensor 't': entry has no 'shape'"},
    {"entry missing data_offsets", E(F32x2), 0, AUTO, 8, MOEQ_STATUS_CHECKPOINT,
     "tensor 't': entry has no 'data_offsets'"},
    {"entry with an extra key", E(F32x2 ",\"data_offsets\":[0,8],\"x\":1"), 0, AUTO, 8,
     MOEQ_STATUS_CHECKPOINT, "tensor 't': unexpected key 'x'"},
    {"entry with dtype twice", E(F32x2 ",\"dtype\":\"F32\",\"data_offsets\":[0,8]"), 0, AUTO, 8,
     MOEQ_STATUS_CHECKPOINT, "tensor 't': key 'dtype' appears twice"},
    {"dtype not a string", E("\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]"), 0, AUTO, 8,
     MOEQ_STATUS_CHECKPOINT, "tensor 't': dtype is a JSON number"},
    {"unknown dtype", E("\"dtype\":\"F4\",\"shape\":[2],\"data_offsets\":[0,1]"), 0, AUTO, 1,
     MOEQ_STATUS_CHECKPOINT,
     "tensor 't': unknown dtype 'F4' (known: F64, F32, F16, BF16, F8_E4M3, F8_E5M2, I8, U8, "
     "I16, U16, I32, U32, I64, U64, BOOL)"},
    {"lower-case dtype", E("\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]"), 0, AUTO, 8,
     MOEQ_STATUS_CHECKPOINT, "unknown dtype 'f32'"},
    {"shape not an array", E("\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]"), 0, AUTO, 8,
     MOEQ_STATUS_CHECKPOINT, "tensor 't': shape is a JSON number"},
    {"negative shape", E("\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]"), 0, AUTO, 8,
     MOEQ_STATUS_CHECKPOINT, "tensor 't': shape[0] is not a non-negative integer"},
    {"float shape", E("\"dtype\":\"U8\",\"shape\":[2,1.5],\"data_offsets\":[0,3]"), 0, AUTO, 3,
     MOEQ_STATUS_CHECKPOINT, "tensor 't': shape[1] is not a non-negative integer"},
    {"string in shape", E("\"dtype\":\"U8\",\"shape\":[\"2\"],\"data_offsets\":[0,2]"), 0, AUTO, 2,
     MOEQ_STATUS_CHECKPOINT, "shape[0] is not a non-negative integer"},
    {"shape beyond 2^53", E("\"dtype\":\"U8\",\"shape\":[1e300],\"data_offsets\":[0,2]"), 0, AUTO,
     2, MOEQ_STATUS_CHECKPOINT, "shape[0] is not a non-negative integer"},
    {"too many dims", E("\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]"), 0,
     AUTO, 1, MOEQ_STATUS_CHECKPOINT, "tensor 't': shape has 9 dimensions, at most 8"},
    {"offsets not an array", E(F32x2 ",\"data_offsets\":8"), 0, AUTO, 8, MOEQ_STATUS_CHECKPOINT,
     "tensor 't': data_offsets must be [begin, end]"},
    {"three offsets", E(F32x2 ",\"data_offsets\":[0,8,8]"), 0, AUTO, 8, MOEQ_STATUS_CHECKPOINT,
     "tensor 't': data_offsets must be [begin, end]"},
    {"negative offset", E(F32x2 ",\"data_offsets\":[-8,0]"), 0, AUTO, 8, MOEQ_STATUS_CHECKPOINT,
     "tensor 't': data_offsets must be [begin, end]"},
    {"offsets reversed", E(F32x2 ",\"data_offsets\":[8,0]"), 0, AUTO, 8, MOEQ_STATUS_CHECKPOINT,
     "tensor 't': data_offsets [8, 0] are reversed"},
    {"offsets past the end", E(F32x2 ",\"data_offsets\":[0,8]"), 0, AUTO, 4, MOEQ_STATUS_CHECKPOINT,
     "tensor 't': data_offsets [0, 8] end past the data region of 4"},
    {"truncated data region",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
     "\"t\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[4,20]}}",
     0, AUTO, 19, MOEQ_STATUS_CHECKPOINT, "tensor 't': data_offsets [4, 20] end past"},
    {"size mismatch", E("\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]"), 0, AUTO, 24,
     MOEQ_STATUS_CHECKPOINT,
     "tensor 't': data_offsets [0, 20] hold 20 bytes but F32 [2, 3] needs 24"},
    {"size overflow",
     E("\"dtype\":\"F64\",\"shape\":[4503599627370496,4503599627370496],\"data_offsets\":[0,8]"), 0,
     AUTO, 8, MOEQ_STATUS_CHECKPOINT, "tensor 't': F64 x [4503599627370496, "},
    {"overlapping tensors",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
     0, AUTO, 12, MOEQ_STATUS_CHECKPOINT, "tensors 'a' (bytes 0..8) and 't' (bytes 4..12) overlap"},
    {"tensor inside another",
     "{\"big\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[0,16]},"
     "\"t\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[14,16]},"
     "\"u\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]}}",
     0, AUTO, 16, MOEQ_STATUS_CHECKPOINT, "tensors 'big' (bytes 0..16) and 'u' (bytes 4..6)"},
    {"duplicate names",
     "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
     "\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
     0, AUTO, 2, MOEQ_STATUS_CHECKPOINT, "tensor 't' appears twice in the header"},
    {"metadata not an object", "{\"__metadata__\":[\"format\"]}", 0, AUTO, 0,
     MOEQ_STATUS_CHECKPOINT, "'__metadata__' is a JSON array, not an object of strings"},
    {"metadata not strings", "{\"__metadata__\":{\"format\":\"pt\",\"n\":1}}", 0, AUTO, 0,
     MOEQ_STATUS_CHECKPOINT, "'__metadata__' value of 'n' is a JSON number"},
    {"metadata twice", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, AUTO, 0,
     MOEQ_STATUS_CHECKPOINT, "'__metadata__' appears twice"},
};

/* The path the corrupt cases are written to. */
static const char *corrupt_path(char *buf, size_t size) {
    return in_dir("bad.safetensors", buf, size);
}

static unsigned char *corrupt_image(const corrupt_case *c, size_t *n) {
    if (!c->header) {
        unsigned char *buf = malloc(c->size + 1);
        for (size_t i = 0; i < c->size; i++) buf[i] = (unsigned char)(i + 2);
        *n = c->size;
        return buf;
    }
    size_t hsize = c->size ? c->size : strlen(c->header);
    return st_image(c->len_field == AUTO ? hsize : c->len_field, c->header, hsize, c->data_len, n);
}

START_TEST(test_corrupt_files) {
    char path[128];
    corrupt_path(path, sizeof path);
    for (size_t k = 0; k < MOEQ__ARRAY_LEN(k_corrupt); k++) {
        const corrupt_case *c = &k_corrupt[k];
        size_t n;
        unsigned char *img = corrupt_image(c, &n);
        moeq_test_write_file(path, img, n);
        free(img);
        moeq_checkpoint *ck = (moeq_checkpoint *)&ck;
        moeq_error err;
        moeq_error_clear(&err);
        moeq_status rc = moeq_checkpoint_open(path, &ck, &err);
        ck_assert_msg((int)rc == c->status, "%s: status %s, want %s: %s", c->label,
                      moeq_status_name(rc), moeq_status_name(c->status), err.message);
        ck_assert_ptr_null(ck);
        ck_assert_int_eq(err.code, c->status);
        ck_assert_msg(strstr(err.message, c->want) && strstr(err.message, path),
                      "%s: message \"%s\" lacks \"%s\" or the path", c->label, err.message,
                      c->want);
    }
}
END_TEST

/* Every case, and a good file, cut at every length: an error, never a crash. */
START_TEST(test_corrupt_files_truncated) {
    char path[128];
    corrupt_path(path, sizeof path);
    static const char good[] = "{\"__metadata__\":{\"format\":\"pt\"},"
                               "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                               "\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[8,11]}}";
    for (size_t k = 0; k <= MOEQ__ARRAY_LEN(k_corrupt); k++) {
        size_t n;
        unsigned char *img;
        if (k < MOEQ__ARRAY_LEN(k_corrupt)) {
            img = corrupt_image(&k_corrupt[k], &n);
        } else {
            img = st_image(strlen(good), good, strlen(good), 11, &n);
            moeq_test_write_file(path, img, n);
            moeq_checkpoint *ck;
            moeq_error err;
            ck_assert_ok(moeq_checkpoint_open(path, &ck, &err), &err);
            moeq_checkpoint_close(ck);
        }
        for (size_t len = 0; len < n; len++) {
            moeq_test_write_file(path, img, len);
            moeq_checkpoint *ck = (moeq_checkpoint *)&ck;
            moeq_error err;
            moeq_status rc = moeq_checkpoint_open(path, &ck, &err);
            ck_assert_msg(rc != MOEQ_STATUS_OK, "case %zu cut at %zu opened", k, len);
            ck_assert_ptr_null(ck);
            ck_assert_int_eq(err.code, rc);
            ck_assert_ptr_nonnull(strstr(err.message, path));
        }
        free(img);
    }
}
END_TEST

/* ---- broken indexes ------------------------------------------------------------------ */

typedef struct index_case {
    const char *label;
    const char *index;
    int status;
    const char *want;
} index_case;

/* Shards: s1 holds a and x, s2 holds b, s3 holds a again. */
static const index_case k_index[] = {
    {"not JSON", "{\"weight_map\": ", MOEQ_STATUS_CHECKPOINT, "index is not valid JSON"},
    {"an array", "[]", MOEQ_STATUS_CHECKPOINT, "index is a JSON array"},
    {"weight_map missing", "{\"metadata\": {}}", MOEQ_STATUS_CHECKPOINT,
     "index has no 'weight_map'"},
    {"weight_map an array", "{\"weight_map\": []}", MOEQ_STATUS_CHECKPOINT,
     "'weight_map' is a JSON array"},
    {"weight_map twice", "{\"weight_map\": {}, \"weight_map\": {}}", MOEQ_STATUS_CHECKPOINT,
     "'weight_map' appears twice"},
    {"weight_map empty", "{\"weight_map\": {}}", MOEQ_STATUS_CHECKPOINT,
     "'weight_map' lists no tensors"},
    {"metadata a string", "{\"metadata\": \"x\", \"weight_map\": {\"a\": \"s1.safetensors\"}}",
     MOEQ_STATUS_CHECKPOINT, "'metadata' is a JSON string"},
    {"shard not a string", "{\"weight_map\": {\"a\": 1}}", MOEQ_STATUS_CHECKPOINT,
     "tensor 'a' maps to a JSON number"},
    {"tensor listed twice",
     "{\"weight_map\": {\"a\": \"s1.safetensors\", \"a\": \"s1.safetensors\"}}",
     MOEQ_STATUS_CHECKPOINT, "lists tensor 'a' twice"},
    {"missing shard", "{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s9.safetensors\"}}",
     MOEQ_STATUS_CHECKPOINT, "tensor 'b' in shard 's9.safetensors', but "},
    {"tensor missing from its shard",
     "{\"weight_map\": {\"a\": \"s1.safetensors\", \"q\": \"s2.safetensors\"}}",
     MOEQ_STATUS_CHECKPOINT, "tensor 'q' in shard 's2.safetensors', which does not hold it"},
    {"tensor in another shard",
     "{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s2.safetensors\","
     " \"x\": \"s2.safetensors\"}}",
     MOEQ_STATUS_CHECKPOINT, "tensor 'x' in shard 's2.safetensors', but it is in "},
    {"duplicate across shards",
     "{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s3.safetensors\"}}",
     MOEQ_STATUS_CHECKPOINT, "tensor 'a' is in two files: "},
    {"shard name with ..", "{\"weight_map\": {\"a\": \"../s1.safetensors\"}}",
     MOEQ_STATUS_CHECKPOINT, "shard '../s1.safetensors', which is not a plain file name"},
    {"shard name ..", "{\"weight_map\": {\"a\": \"..\"}}", MOEQ_STATUS_CHECKPOINT,
     "shard '..', which is not a plain file name"},
    {"shard name with /", "{\"weight_map\": {\"a\": \"/tmp/s1.safetensors\"}}",
     MOEQ_STATUS_CHECKPOINT, "not a plain file name"},
    {"shard name empty", "{\"weight_map\": {\"a\": \"\"}}", MOEQ_STATUS_CHECKPOINT,
     "not a plain file name"},
    {"shard corrupt", "{\"weight_map\": {\"c\": \"bad.safetensors\"}}", MOEQ_STATUS_CHECKPOINT,
     "bad.safetensors: tensor 'c': unknown dtype"},
};

static void write_index_shards(void) {
    int32_t v[2] = {1, 2};
    moeq_tensor s1[2] = {
        {.name = "a", .dtype = MOEQ_DTYPE_I32, .ndim = 1, .shape = {1}, .data = &v[0], .nbytes = 4},
        {.name = "x", .dtype = MOEQ_DTYPE_I32, .ndim = 1, .shape = {1}, .data = &v[1], .nbytes = 4},
    };
    char path[128];
    moeq_error err;
    ck_assert_ok(
        moeq_safetensors_write(in_dir("s1.safetensors", path, sizeof path), s1, 2, NULL, &err),
        &err);
    write_one("s2.safetensors", "b", 3);
    write_one("s3.safetensors", "a", 4);
    write_st(in_dir("bad.safetensors", path, sizeof path),
             "{\"c\":{\"dtype\":\"X\",\"shape\":[],\"data_offsets\":[0,1]}}", 1);
}

START_TEST(test_corrupt_indexes) {
    write_index_shards();
    char index[128];
    in_dir("model.safetensors.index.json", index, sizeof index);
    for (size_t k = 0; k < MOEQ__ARRAY_LEN(k_index); k++) {
        const index_case *c = &k_index[k];
        write_text("model.safetensors.index.json", c->index);
        const char *targets[2] = {index, g_dir};
        for (int t = 0; t < 2; t++) {
            moeq_checkpoint *ck = (moeq_checkpoint *)&ck;
            moeq_error err;
            moeq_status rc = moeq_checkpoint_open(targets[t], &ck, &err);
            ck_assert_msg((int)rc == c->status, "%s: status %s, want %s: %s", c->label,
                          moeq_status_name(rc), moeq_status_name(c->status), err.message);
            ck_assert_ptr_null(ck);
            ck_assert_msg(strstr(err.message, c->want) != NULL, "%s: message \"%s\" lacks \"%s\"",
                          c->label, err.message, c->want);
            ck_assert_msg(strstr(err.message, g_dir) != NULL, "%s: no path in \"%s\"", c->label,
                          err.message);
        }
        /* Cut at every length. */
        size_t n = strlen(c->index);
        for (size_t len = 0; len < n; len++) {
            char path[128];
            moeq_test_write_file(in_dir("model.safetensors.index.json", path, sizeof path),
                                 c->index, len);
            moeq_checkpoint *ck = (moeq_checkpoint *)&ck;
            moeq_error err;
            ck_assert_int_ne(moeq_checkpoint_open(index, &ck, &err), MOEQ_STATUS_OK);
            ck_assert_ptr_null(ck);
        }
    }
    /* Sanity: the shards themselves are fine. */
    write_text("model.safetensors.index.json",
               "{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s2.safetensors\","
               " \"x\": \"s1.safetensors\"}}");
    moeq_checkpoint *ck;
    moeq_error err;
    ck_assert_ok(moeq_checkpoint_open(index, &ck, &err), &err);
    ck_assert_int_eq(value_of(ck, "a"), 1);
    ck_assert_int_eq(value_of(ck, "b"), 3);
    moeq_checkpoint_close(ck);
}
END_TEST

/* ---- writer errors --------------------------------------------------------------------- */

START_TEST(test_writer_rejects) {
    unsigned char data[24] = {0};
    const moeq_tensor good = {.name = "w",
                              .dtype = MOEQ_DTYPE_F32,
                              .ndim = 2,
                              .shape = {2, 3},
                              .data = data,
                              .nbytes = 24};
    struct {
        const char *label;
        moeq_tensor t;
        const char *meta;
        const char *want;
    } cases[] = {
        {"no name", {.name = NULL}, NULL, "tensors[1] has no name"},
        {"empty name", {.name = ""}, NULL, "tensors[1] has no name"},
        {"reserved name", {.name = "__metadata__"}, NULL, "'__metadata__' is reserved"},
        {"bad UTF-8 name", {.name = "w\xff"}, NULL, "tensors[1]: name is not valid UTF-8"},
        {"duplicate name",
         {.name = "w", .dtype = MOEQ_DTYPE_U8, .data = data, .nbytes = 1},
         NULL,
         "tensor 'w' is given twice"},
        {"bad dtype", {.name = "v", .dtype = 0}, NULL, "tensor 'v': unknown dtype 0"},
        {"dtype past the list", {.name = "v", .dtype = 99}, NULL, "tensor 'v': unknown dtype 99"},
        {"ndim 9",
         {.name = "v", .dtype = MOEQ_DTYPE_U8, .ndim = 9},
         NULL,
         "tensor 'v': ndim 9 is outside 0..8"},
        {"negative ndim",
         {.name = "v", .dtype = MOEQ_DTYPE_U8, .ndim = -1},
         NULL,
         "tensor 'v': ndim -1"},
        {"negative dim",
         {.name = "v", .dtype = MOEQ_DTYPE_U8, .ndim = 1, .shape = {-3}},
         NULL,
         "tensor 'v': shape[0] = -3 is outside"},
        {"nbytes mismatch",
         {.name = "v",
          .dtype = MOEQ_DTYPE_BF16,
          .ndim = 1,
          .shape = {3},
          .data = data,
          .nbytes = 3},
         NULL,
         "tensor 'v': nbytes is 3 but BF16 [3] needs 6"},
        {"size overflow",
         {.name = "v",
          .dtype = MOEQ_DTYPE_F64,
          .ndim = 3,
          .shape = {(int64_t)1 << 40, (int64_t)1 << 40, 1},
          .data = data,
          .nbytes = 3},
         NULL,
         "tensor 'v': F64 x [1099511627776, 1099511627776, 1] elements overflow"},
        {"NULL data",
         {.name = "v", .dtype = MOEQ_DTYPE_U8, .ndim = 1, .shape = {3}, .nbytes = 3},
         NULL,
         "tensor 'v': data is NULL"},
        {"metadata not JSON",
         {.name = "v", .dtype = MOEQ_DTYPE_U8, .ndim = 0, .data = data, .nbytes = 1},
         "{\"a\":",
         "metadata is not valid JSON"},
        {"metadata an array",
         {.name = "v", .dtype = MOEQ_DTYPE_U8, .data = data, .nbytes = 1},
         "[\"a\"]",
         "metadata is a JSON array"},
        {"metadata with a number",
         {.name = "v", .dtype = MOEQ_DTYPE_U8, .data = data, .nbytes = 1},
         "{\"a\":\"1\",\"b\":2}",
         "metadata value of 'b' is a JSON number"},
        {"metadata key twice",
         {.name = "v", .dtype = MOEQ_DTYPE_U8, .data = data, .nbytes = 1},
         "{\"a\":\"1\",\"a\":\"2\"}",
         "metadata key 'a' appears twice"},
        {"metadata trailing text",
         {.name = "v", .dtype = MOEQ_DTYPE_U8, .data = data, .nbytes = 1},
         "{} {}",
         "metadata is not valid JSON"},
    };
    char path[128];
    in_dir("out.safetensors", path, sizeof path);
    for (size_t k = 0; k < MOEQ__ARRAY_LEN(cases); k++) {
        moeq_tensor t[2] = {good, cases[k].t};
        moeq_error err;
        moeq_status rc = moeq_safetensors_write(path, t, 2, cases[k].meta, &err);
        ck_assert_msg(rc == MOEQ_STATUS_INVALID_ARG, "%s: %s: %s", cases[k].label,
                      moeq_status_name(rc), err.message);
        ck_assert_msg(strstr(err.message, cases[k].want) && strstr(err.message, path),
                      "%s: message \"%s\" lacks \"%s\"", cases[k].label, err.message,
                      cases[k].want);
        ck_assert_int_ne(access(path, F_OK), 0);
    }
    moeq_error err;
    ck_assert_status(moeq_safetensors_write(NULL, &good, 1, NULL, &err), MOEQ_STATUS_INVALID_ARG,
                     &err);
    ck_assert_status(moeq_safetensors_write(path, NULL, 1, NULL, &err), MOEQ_STATUS_INVALID_ARG,
                     &err);
    /* A folder that does not exist: IO, nothing left behind. */
    char missing[160];
    snprintf(missing, sizeof missing, "%s/no/such/dir/x.safetensors", g_dir);
    ck_assert_status(moeq_safetensors_write(missing, &good, 1, NULL, &err), MOEQ_STATUS_IO, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "x.safetensors.tmp: cannot create"));
    /* Overwriting an existing file replaces it whole. */
    write_text("out.safetensors", "old contents");
    ck_assert_ok(moeq_safetensors_write(path, &good, 1, NULL, &err), &err);
    moeq_checkpoint *ck;
    ck_assert_ok(moeq_checkpoint_open(path, &ck, &err), &err);
    moeq_checkpoint_close(ck);
}
END_TEST

/* ---- allocation failures --------------------------------------------------------------- */

START_TEST(test_open_out_of_memory) {
    /* A sharded checkpoint (index, two shards, metadata) and a directory scan. */
    char path[128];
    int32_t v[3] = {1, 2, 3};
    moeq_tensor s1[2] = {
        {.name = "a", .dtype = MOEQ_DTYPE_I32, .ndim = 1, .shape = {1}, .data = &v[0], .nbytes = 4},
        {.name = "c", .dtype = MOEQ_DTYPE_I32, .ndim = 1, .shape = {1}, .data = &v[1], .nbytes = 4},
    };
    moeq_error err;
    mkdir(in_dir("sharded", path, sizeof path), 0700);
    ck_assert_ok(moeq_safetensors_write(in_dir("sharded/s1.safetensors", path, sizeof path), s1, 2,
                                        "{\"format\":\"pt\"}", &err),
                 &err);
    write_one("sharded/s2.safetensors", "b", 3);
    write_text("sharded/model.safetensors.index.json",
               "{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s2.safetensors\"}}");
    mkdir(in_dir("plain", path, sizeof path), 0700);
    write_one("plain/x.safetensors", "x", 1);
    write_one("plain/y.safetensors", "y", 2);

    const char *dirs[] = {"sharded", "plain"};
    for (size_t d = 0; d < 2; d++) {
        in_dir(dirs[d], path, sizeof path);
        long fails = 0;
        for (long n = 0;; n++) {
            ck_assert_int_lt(n, 1000);
            moeq_checkpoint *ck = (moeq_checkpoint *)&ck;
            moeq__test_fail_alloc_after(n);
            moeq_status rc = moeq_checkpoint_open(path, &ck, &err);
            moeq__test_fail_alloc_after(-1);
            if (rc == MOEQ_STATUS_OK) {
                ck_assert_uint_eq(moeq_checkpoint_tensor_count(ck), d == 0 ? 3 : 2);
                moeq_checkpoint_close(ck);
                break;
            }
            ck_assert_status(rc, MOEQ_STATUS_NOMEM, &err);
            ck_assert_ptr_null(ck);
            fails++;
        }
        ck_assert_int_gt(fails, 5);
    }

    /* The writer too. */
    in_dir("oom.safetensors", path, sizeof path);
    for (long n = 0;; n++) {
        ck_assert_int_lt(n, 1000);
        moeq__test_fail_alloc_after(n);
        moeq_status rc = moeq_safetensors_write(path, s1, 2, "{\"format\":\"pt\"}", &err);
        moeq__test_fail_alloc_after(-1);
        if (rc == MOEQ_STATUS_OK) break;
        ck_assert_status(rc, MOEQ_STATUS_NOMEM, &err);
        ck_assert_int_ne(access(path, F_OK), 0);
    }
}
END_TEST

/* ---- files over 4 GiB -------------------------------------------------------------------- */

/* A sparse file whose one tensor ends past 4 GiB: offsets and sizes must not
 * be truncated to 32 bits, and opening must not read the data. */
START_TEST(test_file_over_4gib) {
    if (SIZE_MAX <= UINT32_MAX) return; /* cannot be mapped on 32-bit hosts */
    const uint64_t big = ((uint64_t)1 << 32) + 4096 + 3;
    char header[160];
    int hlen = snprintf(header, sizeof header,
                        "{\"small\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]},"
                        "\"big\":{\"dtype\":\"U8\",\"shape\":[%llu],\"data_offsets\":[3,%llu]}}",
                        (unsigned long long)big, (unsigned long long)(big + 3));
    char path[128];
    in_dir("big.safetensors", path, sizeof path);
    size_t n;
    unsigned char *img = st_image((uint64_t)hlen, header, (size_t)hlen, 3, &n);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, img, n), (ssize_t)n);
    free(img);
    const off_t last = (off_t)(8 + (uint64_t)hlen + 3 + big - 1);
    const unsigned char mark = 0xA5;
    if (pwrite(fd, &mark, 1, last) != 1) {
        close(fd);
        return; /* no room for a sparse file this size: nothing to test here */
    }
    close(fd);
    moeq_checkpoint *ck;
    moeq_error err;
    ck_assert_ok(moeq_checkpoint_open(path, &ck, &err), &err);
    moeq_tensor t;
    ck_assert_ok(moeq_checkpoint_find(ck, "big", &t), &err);
    ck_assert_uint_eq(t.nbytes, big);
    ck_assert_int_eq(t.shape[0], (int64_t)big);
    const unsigned char *p = t.data;
    ck_assert_uint_eq(p[big - 1], mark);
    ck_assert_uint_eq(p[0], 0);
    ck_assert_uint_eq(moeq__checkpoint_file_size(ck, 0), (uint64_t)last + 1);
    moeq_checkpoint_close(ck);
    unlink(path);
}
END_TEST

static Suite *safetensors_suite(void) {
    Suite *s = suite_create("safetensors");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, make_dir, remove_dir);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_round_trip_every_dtype);
    tcase_add_test(tc, test_writer_matches_safetensors_package);
    tcase_add_test(tc, test_name_order_and_lookup);
    tcase_add_test(tc, test_many_tensors);
    tcase_add_test(tc, test_sharded_index);
    tcase_add_test(tc, test_directory_open);
    tcase_add_test(tc, test_open_arguments);
    tcase_add_test(tc, test_corrupt_files);
    tcase_add_test(tc, test_corrupt_files_truncated);
    tcase_add_test(tc, test_corrupt_indexes);
    tcase_add_test(tc, test_writer_rejects);
    tcase_add_test(tc, test_open_out_of_memory);
    tcase_add_test(tc, test_file_over_4gib);
    suite_add_tcase(s, tc);
    return s;
}

/* Opens IN and writes every tensor, and the first file's metadata, to OUT. */
static int copy_checkpoint(const char *in, const char *out) {
    moeq_checkpoint *ck;
    moeq_error err;
    if (moeq_checkpoint_open(in, &ck, &err) != MOEQ_STATUS_OK) {
        fprintf(stderr, "%s\n", err.message);
        return EXIT_FAILURE;
    }
    uint32_t n = (uint32_t)moeq_checkpoint_tensor_count(ck);
    moeq_tensor *t = calloc(n + 1, sizeof *t);
    for (uint32_t i = 0; i < n; i++) moeq_checkpoint_tensor(ck, i, &t[i]);
    moeq__sb meta;
    moeq__sb_init(&meta);
    uint32_t n_meta = moeq__checkpoint_metadata_count(ck, 0);
    for (uint32_t j = 0; j < n_meta; j++) {
        const char *key, *value;
        moeq__checkpoint_metadata_pair(ck, 0, j, &key, &value);
        moeq__sb_putc(&meta, j ? ',' : '{');
        moeq__sb_json_string(&meta, key);
        moeq__sb_putc(&meta, ':');
        moeq__sb_json_string(&meta, value);
    }
    if (n_meta > 0) moeq__sb_putc(&meta, '}');
    moeq_status rc = moeq_safetensors_write(out, t, n, n_meta ? meta.data : NULL, &err);
    if (rc != MOEQ_STATUS_OK) fprintf(stderr, "%s\n", err.message);
    moeq__sb_free(&meta);
    free(t);
    moeq_checkpoint_close(ck);
    return rc == MOEQ_STATUS_OK ? EXIT_SUCCESS : EXIT_FAILURE;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--copy") == 0) return copy_checkpoint(argv[2], argv[3]);
    SRunner *sr = srunner_create(safetensors_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
