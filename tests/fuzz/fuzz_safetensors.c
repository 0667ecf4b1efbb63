/*
 * fuzz_safetensors.c - file bytes -> moeq_checkpoint_open (a single file, a
 * model directory, a sharded index next to valid shards), every tensor
 * listed, looked up and read; then moeq_inspect against a config and
 * moeq_dequantize of each quantized module found.
 *
 * Input: byte 0 = mode, byte 1 = config (one of the conformance fixtures'
 * args, see k_configs), then the file.  Mode bits 0-1:
 *   0  the file is "f.safetensors", opened by path;
 *   1  the file is "model.safetensors.index.json" next to two valid shards,
 *      opened as a directory (bit 2 clear) or by the index path (bit 2 set);
 *   2  the file is "a.safetensors" in a directory with a valid
 *      "b.safetensors" (no index), opened as a directory;
 *   3  the file is "model.safetensors" of a directory, opened as a directory.
 * bit 3: inspect writes JSON; bit 4: inspect by names only; bit 5: dequantize
 * to BF16 instead of F32; bit 6: legacy packing flag; bit 7: also load the
 * checkpoint into a small wna16 layer (moeq_moe_load_checkpoint).
 *
 * The reader maps files, so each input is written to a scratch directory
 * under /dev/shm (or $TMPDIR) made once per process and removed at exit.
 */
#define _DEFAULT_SOURCE
#include "fuzz_common.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct {
    const char *weights;
    const char *format;
} k_configs[] = {
    {"{\"num_bits\":4,\"group_size\":32,\"strategy\":\"group\"}", "pack-quantized"},
    {"{\"num_bits\":4,\"group_size\":32,\"strategy\":\"group\",\"symmetric\":false,"
     "\"zp_dtype\":\"torch.int8\"}", "pack-quantized"},
    {"{\"num_bits\":4,\"strategy\":\"channel\"}", "pack-quantized"},
    {"{\"num_bits\":4,\"strategy\":\"channel\",\"symmetric\":false}", "pack-quantized"},
    {"{\"num_bits\":4,\"strategy\":\"tensor\",\"symmetric\":false}", "pack-quantized"},
    {"{\"num_bits\":8,\"group_size\":64,\"strategy\":\"group\",\"symmetric\":false}",
     "pack-quantized"},
    {"{\"num_bits\":8,\"strategy\":\"channel\"}", "pack-quantized"},
    {"{\"num_bits\":4,\"group_size\":16,\"strategy\":\"group\",\"actorder\":\"group\"}",
     "pack-quantized"},
    {"{\"num_bits\":4,\"group_size\":16,\"strategy\":\"group\",\"actorder\":\"group\","
     "\"symmetric\":false}", "pack-quantized"},
    {"{\"num_bits\":3,\"group_size\":32,\"strategy\":\"group\",\"symmetric\":false}",
     "pack-quantized"},
    {"{\"num_bits\":8,\"strategy\":\"channel\"}", "int-quantized"},
    {"{\"num_bits\":8,\"strategy\":\"tensor\",\"symmetric\":false}", "int-quantized"},
    {"{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"tensor\"}", "float-quantized"},
    {"{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"channel\"}", "float-quantized"},
    {"{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"block\",\"block_structure\":[16,32]}",
     "float-quantized"},
    {"{\"num_bits\":4,\"type\":\"float\",\"group_size\":16,\"strategy\":\"tensor_group\","
     "\"scale_dtype\":\"torch.float8_e4m3fn\"}", "nvfp4-pack-quantized"},
    {"{\"num_bits\":4,\"type\":\"float\",\"group_size\":16,\"strategy\":\"tensor_group\"}",
     "nvfp4-pack-quantized"},
    {"{\"num_bits\":4,\"type\":\"float\",\"group_size\":32,\"strategy\":\"group\","
     "\"scale_dtype\":\"torch.uint8\"}", "mxfp4-pack-quantized"},
    {"{\"num_bits\":8,\"type\":\"float\",\"group_size\":32,\"strategy\":\"group\","
     "\"scale_dtype\":\"torch.uint8\"}", "mxfp8-quantized"},
    {"{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"channel\"}", "naive-quantized"},
};
#define N_CONFIGS (sizeof k_configs / sizeof k_configs[0])

static char g_root[256];
static moeq_config *g_cfg[N_CONFIGS];

static void path_of(char *buf, size_t n, const char *sub) {
    snprintf(buf, n, "%s/%s", g_root, sub);
}

static void write_bytes(const char *sub, const uint8_t *data, size_t n) {
    char path[512];
    path_of(path, sizeof path, sub);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) abort();
    while (n > 0) {
        ssize_t w = write(fd, data, n);
        if (w <= 0) abort();
        data += w;
        n -= (size_t)w;
    }
    close(fd);
}

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    const struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char path[768];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
            remove_tree(path);
        } else {
            unlink(path);
        }
    }
    closedir(d);
    rmdir(dir);
}

static void cleanup(void) {
    for (size_t i = 0; i < N_CONFIGS; i++) moeq_config_destroy(g_cfg[i]);
    if (g_root[0]) remove_tree(g_root);
}

/* Valid shards the index mode points at, and the valid neighbour of mode 2. */
static void write_valid(const char *sub, int which) {
    static const float w[6] = {1, 2, 3, 4, 5, 6};
    static const uint16_t b[3] = {0x3f80, 0x4000, 0x4040};
    static const int32_t packed[8] = {0x12345678, -1, 0, 7, 0x11111111, 2, 3, 4};
    static const uint16_t scale[4] = {0x3c00, 0x3c00, 0x3c00, 0x3c00};
    static const int64_t shape[2] = {4, 16};
    char path[512];
    path_of(path, sizeof path, sub);
    moeq_tensor t[3];
    memset(t, 0, sizeof t);
    uint32_t n;
    if (which == 0) {
        t[0] = (moeq_tensor){"x.weight", MOEQ_DTYPE_F32, 2, {2, 3}, w, sizeof w, NULL};
        t[1] = (moeq_tensor){"x.bias", MOEQ_DTYPE_BF16, 1, {3}, b, sizeof b, NULL};
        n = 2;
    } else {
        t[0] = (moeq_tensor){"y.weight_packed", MOEQ_DTYPE_I32, 2, {4, 2}, packed, sizeof packed,
                             NULL};
        t[1] = (moeq_tensor){"y.weight_scale", MOEQ_DTYPE_F16, 2, {4, 1}, scale, sizeof scale,
                             NULL};
        t[2] = (moeq_tensor){"y.weight_shape", MOEQ_DTYPE_I64, 1, {2}, shape, sizeof shape, NULL};
        n = 3;
    }
    moeq_error err;
    if (moeq_safetensors_write(path, t, n, "{\"format\":\"pt\"}", &err) != MOEQ_STATUS_OK) {
        fprintf(stderr, "fuzz_safetensors: %s\n", err.message);
        abort();
    }
}

static void setup(void) {
    if (g_root[0]) return;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
    if (!base) base = "/tmp";
    snprintf(g_root, sizeof g_root, "%s/moeq_fuzz_st_XXXXXX", base);
    if (!mkdtemp(g_root)) abort();
    atexit(cleanup);
    char path[512];
    const char *dirs[] = {"single", "index", "dir", "model"};
    for (int i = 0; i < 4; i++) {
        path_of(path, sizeof path, dirs[i]);
        if (mkdir(path, 0700) != 0) abort();
    }
    write_valid("index/model-00001-of-00002.safetensors", 0);
    write_valid("index/model-00002-of-00002.safetensors", 1);
    write_valid("dir/b.safetensors", 1);
    for (size_t i = 0; i < N_CONFIGS; i++) {
        char json[1024];
        snprintf(json, sizeof json,
                 "{\"quant_method\":\"compressed-tensors\",\"format\":\"%s\",\"ignore\":"
                 "[\"lm_head\"],\"config_groups\":{\"g\":{\"targets\":[\"Linear\"],"
                 "\"weights\":%s}}}",
                 k_configs[i].format, k_configs[i].weights);
        moeq_error err;
        if (moeq_config_parse(json, strlen(json), NULL, &g_cfg[i], &err) != MOEQ_STATUS_OK) {
            fprintf(stderr, "fuzz_safetensors: config %zu: %s\n", i, err.message);
            abort();
        }
    }
}

/* Dequantizes module `m` (tensors [first, first + n) of ck, all named "m.*"). */
static void dequant_module(const moeq_config *cfg, const moeq_checkpoint *ck, uint64_t first,
                           uint32_t n, const char *module, uint8_t mode) {
    moeq_error err;
    moeq_resolution res;
    int32_t kind = strstr(module, "experts.") ? MOEQ_MODULE_EXPERT : MOEQ_MODULE_LINEAR;
    if (FZ(&err, moeq_resolve(cfg, module, kind, NULL, &res, &err)) != MOEQ_STATUS_OK) return;
    if (res.status != MOEQ_MATCH_QUANTIZED) return;
    moeq_tensor t[16];
    for (uint32_t i = 0; i < n; i++) {
        FZ_ASSERT(moeq_checkpoint_tensor(ck, first + i, &t[i]) == MOEQ_STATUS_OK);
    }
    uint32_t flags = (mode & 0x40) ? MOEQ_DEQUANT_LEGACY_PACKING : moeq_config_dequant_flags(cfg);
    int32_t dtype = (mode & 0x20) ? MOEQ_DTYPE_BF16 : MOEQ_DTYPE_F32;
    int64_t shape[2] = {0, 0};
    if (FZ(&err, moeq_dequantize(res.weights, res.format, flags, module, t, n, dtype, NULL, 0,
                                 shape, &err)) != MOEQ_STATUS_OK) {
        return;
    }
    FZ_ASSERT(shape[0] >= 0 && shape[1] >= 0);
    if (shape[0] * shape[1] > (1 << 20) || (shape[1] != 0 && shape[0] > (1 << 20) / shape[1])) {
        return;
    }
    uint64_t bytes = (uint64_t)(shape[0] * shape[1]) * moeq_dtype_size(dtype);
    void *out = malloc(bytes ? bytes : 1);
    if (!out) abort();
    int64_t shape2[2];
    FZ(&err, moeq_dequantize(res.weights, res.format, flags, module, t, n, dtype, out, bytes,
                             shape2, &err));
    /* Too small a buffer must be refused, not overrun. */
    if (bytes > 0) {
        FZ(&err, moeq_dequantize(res.weights, res.format, flags, module, t, n, dtype, out,
                                 bytes - 1, shape2, &err));
    }
    free(out);
}

/* Stops a load after a few tensors now and then. */
static int32_t progress(uint64_t done, uint64_t total, void *user) {
    (void)total;
    return done >= *(const uint64_t *)user;
}

/* moeq_moe_load_checkpoint into a wna16 int4 group-32 layer of 2 experts
 * (model.layers.0.mlp.experts, hidden 128, intermediate 24: the conformance
 * fixtures' up_proj). */
static void load_into_layer(const moeq_checkpoint *ck, uint8_t mode) {
    moeq_error err;
    const moeq_config *cfg = g_cfg[0];
    moeq_resolution res;
    if (FZ(&err, moeq_resolve_moe(cfg, "model.layers.0.mlp.experts", 2, NULL, NULL, &res, &err)) !=
        MOEQ_STATUS_OK) {
        return;
    }
    moeq_moe_config mc;
    memset(&mc, 0, sizeof mc);
    mc.scheme = MOEQ_SCHEME_WNA16;
    mc.weights = res.weights;
    mc.format = res.format;
    mc.prefix = "model.layers.0.mlp.experts";
    mc.num_experts = 2;
    mc.hidden_size = 128;
    mc.intermediate_size = 24;
    moeq_moe *layer = NULL;
    if (FZ(&err, moeq_moe_create(&mc, &layer, &err)) != MOEQ_STATUS_OK) return;
    uint64_t stop_at = (mode & 1) ? 3 : UINT64_MAX;
    uint64_t loaded = 0, skipped = 0;
    if (FZ(&err, moeq_moe_load_checkpoint(layer, ck, NULL, (mode & 2) ? progress : NULL, &stop_at,
                                          &loaded, &skipped, &err)) == MOEQ_STATUS_OK) {
        FZ(&err, moeq_moe_finalize(layer, &err));
    }
    moeq_moe_destroy(layer);
}

static void exercise(const moeq_checkpoint *ck, const moeq_config *cfg, uint8_t mode) {
    uint64_t n = moeq_checkpoint_tensor_count(ck);
    unsigned sum = 0;
    for (uint64_t i = 0; i < n; i++) {
        moeq_tensor t, u;
        FZ_ASSERT(moeq_checkpoint_tensor(ck, i, &t) == MOEQ_STATUS_OK);
        FZ_ASSERT(t.name && t.ndim >= 0 && t.ndim <= MOEQ_MAX_DIMS);
        uint64_t count = 1;
        for (int32_t d = 0; d < t.ndim; d++) count *= (uint64_t)t.shape[d];
        FZ_ASSERT(count * moeq_dtype_size(t.dtype) == t.nbytes);
        /* Every byte of the tensor must be readable. */
        const uint8_t *p = t.data;
        for (uint64_t b = 0; b < t.nbytes; b++) sum += p[b];
        FZ_ASSERT(moeq_checkpoint_find(ck, t.name, &u) == MOEQ_STATUS_OK);
        FZ_ASSERT(u.data == t.data && u.nbytes == t.nbytes);
    }
    (void)sum;
    moeq_tensor t;
    FZ_ASSERT(moeq_checkpoint_tensor(ck, n, &t) == MOEQ_STATUS_INVALID_ARG);
    FZ_ASSERT(moeq_checkpoint_find(ck, "no such tensor \x01", &t) == MOEQ_STATUS_NO_MATCH);

    moeq_error err;
    moeq_inspect_options io = {NULL, NULL, (mode >> 3) & 1, (mode >> 4) & 1, NULL};
    moeq_inspect_summary sum_out;
    char *text = NULL;
    if (FZ(&err, moeq_inspect(cfg, ck, &io, &text, &sum_out, &err)) == MOEQ_STATUS_OK) {
        FZ_ASSERT(text != NULL && sum_out.tensors == n);
    }
    moeq_free(text);

    /* Modules: runs of tensors sharing the text before their last '.'. */
    uint32_t modules = 0;
    for (uint64_t i = 0; i < n && modules < 16;) {
        moeq_tensor a;
        moeq_checkpoint_tensor(ck, i, &a);
        const char *dot = strrchr(a.name, '.');
        size_t len = dot ? (size_t)(dot - a.name) : 0;
        uint64_t j = i + 1;
        while (j < n && j - i < 16) {
            moeq_tensor b;
            moeq_checkpoint_tensor(ck, j, &b);
            if (strncmp(b.name, a.name, len) != 0 || b.name[len] != '.' ||
                strchr(b.name + len + 1, '.')) {
                break;
            }
            j++;
        }
        if (dot) {
            char *module = fz_strndup((const uint8_t *)a.name, len);
            dequant_module(cfg, ck, i, (uint32_t)(j - i), module, mode);
            free(module);
            modules++;
        }
        i = j;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    setup();
    uint8_t mode = data[0];
    const moeq_config *cfg = g_cfg[data[1] % N_CONFIGS];
    const uint8_t *file = data + 2;
    size_t n = size - 2;
    char path[512];
    switch (mode & 3) {
        case 0:
            write_bytes("single/f.safetensors", file, n);
            path_of(path, sizeof path, "single/f.safetensors");
            break;
        case 1:
            write_bytes("index/model.safetensors.index.json", file, n);
            path_of(path, sizeof path,
                    (mode & 4) ? "index/model.safetensors.index.json" : "index");
            break;
        case 2:
            write_bytes("dir/a.safetensors", file, n);
            path_of(path, sizeof path, "dir");
            break;
        default:
            write_bytes("model/model.safetensors", file, n);
            path_of(path, sizeof path, "model");
            break;
    }
    moeq_error err;
    moeq_checkpoint *ck = NULL;
    moeq_status st = FZ(&err, moeq_checkpoint_open(path, &ck, &err));
    FZ_ASSERT((st == MOEQ_STATUS_OK) == (ck != NULL));
    if (ck) exercise(ck, cfg, mode);
    if (ck && (mode & 0x80)) load_into_layer(ck, mode);
    moeq_checkpoint_close(ck);
    return 0;
}
