/* A test double of libcuda.so.1 that records what it is asked to do (no kernel runs).

   Built in the tests against the cuda.h of the nvidia-cuda-runtime-cu12 wheel, so every
   function here has the real prototype (cuda.h's macros give the versioned symbols, e.g.
   cuMemAlloc -> cuMemAlloc_v2). cuda-python resolves every driver function through
   cuGetProcAddress; a C program links the symbols directly.

   As strict as the driver where the tests lean on it: a call that needs a context without
   one current, a launch beyond the block/grid limits or above 48 KiB of dynamic shared memory
   without the opt-in attribute, a function name not in the module, a tensor map the driver's
   documented requirements refuse (cuTensorMapEncodeTiled: address 16-byte aligned, extents
   1..2^32, strides multiples of 16 below 2^40, boxes 1..256 with the inner one a multiple of
   16 bytes and no wider than the swizzle span) all fail with the driver's code.

   Device memory is host memory (256-byte aligned), so a test can read what a kernel's
   arguments point at. Environment: FAKE_CUDA_LOG (the log, one line per event),
   FAKE_CUDA_CC (compute capability, "80" or "90"), FAKE_CUDA_REJECT_CUBIN=1 (a cubin does
   not load: the PTX fallback is taken). */
#define _POSIX_C_SOURCE 200809L
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ENTRIES 64
#define MAX_PARAMS 64

typedef struct {
    char name[256];
    int nparams; /* -1: unknown (a cubin) */
    int sizes[MAX_PARAMS];
    int max_dynamic_shared;
} fake_function;

typedef struct {
    int id;
    int nfunctions;
    fake_function functions[MAX_ENTRIES];
} fake_module;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int current_set; /* the primary context is current on "the" thread (tests are single-threaded) */
static int context_pushed;
static int modules_loaded;
static int primary_context = 1;

static int cc(void) {
    const char *text = getenv("FAKE_CUDA_CC");
    return text ? atoi(text) : 80;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#include <stdarg.h>
static void say(const char *fmt, ...) {
    const char *path = getenv("FAKE_CUDA_LOG");
    FILE *f;
    va_list ap;
    if (path == NULL) return;
    pthread_mutex_lock(&lock);
    f = fopen(path, "a");
    if (f != NULL) {
        va_start(ap, fmt);
        vfprintf(f, fmt, ap);
        va_end(ap);
        fputc('\n', f);
        fclose(f);
    }
    pthread_mutex_unlock(&lock);
}

static CUresult fail(const char *what, CUresult code) {
    say("error %s %d", what, (int)code);
    return code;
}

#define NEED_CONTEXT(what) \
    if (!current_set && !context_pushed) return fail(what, CUDA_ERROR_INVALID_CONTEXT)

CUresult CUDAAPI cuInit(unsigned int flags) { (void)flags; return CUDA_SUCCESS; }
CUresult CUDAAPI cuDriverGetVersion(int *version) { *version = 12090; return CUDA_SUCCESS; }

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **text) {
    switch (error) {
    case CUDA_SUCCESS: *text = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *text = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_INVALID_CONTEXT: *text = "CUDA_ERROR_INVALID_CONTEXT"; break;
    case CUDA_ERROR_NO_BINARY_FOR_GPU: *text = "CUDA_ERROR_NO_BINARY_FOR_GPU"; break;
    case CUDA_ERROR_NOT_FOUND: *text = "CUDA_ERROR_NOT_FOUND"; break;
    case CUDA_ERROR_INVALID_HANDLE: *text = "CUDA_ERROR_INVALID_HANDLE"; break;
    default: *text = "CUDA_ERROR_UNKNOWN"; return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGetErrorString(CUresult error, const char **text) { return cuGetErrorName(error, text); }

CUresult CUDAAPI cuDeviceGetCount(int *count) { *count = 1; return CUDA_SUCCESS; }
CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal) {
    if (ordinal != 0) return fail("cuDeviceGet", CUDA_ERROR_INVALID_DEVICE);
    *device = 0;
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice device) {
    (void)device;
    snprintf(name, (size_t)len, "fake sm_%d", cc());
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceTotalMem(size_t *bytes, CUdevice device) { (void)device; *bytes = (size_t)1 << 34; return CUDA_SUCCESS; }

CUresult CUDAAPI cuDeviceGetAttribute(int *value, CUdevice_attribute attr, CUdevice device) {
    int sm = cc();
    if (device != 0) return fail("cuDeviceGetAttribute", CUDA_ERROR_INVALID_DEVICE);
    switch (attr) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = sm / 10; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = sm % 10; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = sm >= 90 ? 132 : 108; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *value = 49152; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *value = sm >= 90 ? 232448 : 166912; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *value = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *value = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *value = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *value = 65535; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *value = 32; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *value = 1; break;
    default: *value = 0; /* memory pools and the rest: not supported */
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *context, CUdevice device) {
    (void)device;
    *context = (CUcontext)&primary_context;
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice device) { (void)device; return CUDA_SUCCESS; }
CUresult CUDAAPI cuCtxSetCurrent(CUcontext context) {
    if (context != NULL && context != (CUcontext)&primary_context) return fail("cuCtxSetCurrent", CUDA_ERROR_INVALID_CONTEXT);
    current_set = context != NULL;
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxGetCurrent(CUcontext *context) {
    *context = (current_set || context_pushed) ? (CUcontext)&primary_context : NULL;
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxGetDevice(CUdevice *device) {
    NEED_CONTEXT("cuCtxGetDevice");
    *device = 0;
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxPushCurrent(CUcontext context) {
    if (context != (CUcontext)&primary_context) return fail("cuCtxPushCurrent", CUDA_ERROR_INVALID_CONTEXT);
    context_pushed++;
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxPopCurrent(CUcontext *context) {
    if (context_pushed == 0) return fail("cuCtxPopCurrent", CUDA_ERROR_INVALID_CONTEXT);
    context_pushed--;
    if (context != NULL) *context = (CUcontext)&primary_context;
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxSynchronize(void) { NEED_CONTEXT("cuCtxSynchronize"); return CUDA_SUCCESS; }

CUresult CUDAAPI cuMemGetInfo(size_t *free_bytes, size_t *total) {
    NEED_CONTEXT("cuMemGetInfo");
    *free_bytes = *total = (size_t)1 << 34;
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemAlloc(CUdeviceptr *ptr, size_t bytes) {
    void *p;
    NEED_CONTEXT("cuMemAlloc");
    if (bytes == 0) return fail("cuMemAlloc", CUDA_ERROR_INVALID_VALUE);
    if (posix_memalign(&p, 256, (bytes + 255) / 256 * 256) != 0) p = NULL;
    if (p == NULL) return fail("cuMemAlloc", CUDA_ERROR_OUT_OF_MEMORY);
    *ptr = (CUdeviceptr)(uintptr_t)p;
    say("alloc %llx %zu", (unsigned long long)*ptr, bytes);
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemFree(CUdeviceptr ptr) {
    NEED_CONTEXT("cuMemFree");
    say("free %llx", (unsigned long long)ptr);
    free((void *)(uintptr_t)ptr);
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t bytes) {
    NEED_CONTEXT("cuMemcpyHtoD");
    memcpy((void *)(uintptr_t)dst, src, bytes);
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t bytes) {
    NEED_CONTEXT("cuMemcpyDtoH");
    memcpy(dst, (const void *)(uintptr_t)src, bytes);
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
    NEED_CONTEXT("cuMemcpyDtoD");
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes);
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemsetD8(CUdeviceptr dst, unsigned char value, size_t n) {
    NEED_CONTEXT("cuMemsetD8");
    memset((void *)(uintptr_t)dst, value, n);
    say("memset8 %llx %u %zu", (unsigned long long)dst, (unsigned)value, n);
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream stream) {
    (void)stream;
    return cuMemsetD8(dst, value, n);
}

CUresult CUDAAPI cuStreamCreate(CUstream *stream, unsigned int flags) {
    static int streams;
    (void)flags;
    NEED_CONTEXT("cuStreamCreate");
    *stream = (CUstream)(uintptr_t)(0x1000 + 16 * ++streams);
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamDestroy(CUstream stream) { (void)stream; return CUDA_SUCCESS; }
CUresult CUDAAPI cuStreamSynchronize(CUstream stream) { (void)stream; return CUDA_SUCCESS; }

/* ---- modules: PTX entries and their parameter sizes ---- */

static int ptx_param_size(const char *decl) {
    const char *bracket = strchr(decl, '[');
    if (strstr(decl, ".b8") != NULL && bracket != NULL) return atoi(bracket + 1);
    if (strstr(decl, "64")) return 8;
    if (strstr(decl, "32")) return 4;
    if (strstr(decl, "16")) return 2;
    if (strstr(decl, "8")) return 1;
    return -1;
}

static void parse_ptx(fake_module *m, const char *ptx) {
    const char *p = ptx;
    while ((p = strstr(p, ".entry ")) != NULL && m->nfunctions < MAX_ENTRIES) {
        fake_function *f = &m->functions[m->nfunctions++];
        const char *name = p + 7, *end = strchr(name, '(');
        const char *close;
        size_t len = end ? (size_t)(end - name) : 0;
        while (len > 0 && (name[len - 1] == ' ' || name[len - 1] == '\n')) len--;
        memset(f, 0, sizeof *f);
        memcpy(f->name, name, len < 255 ? len : 255);
        f->max_dynamic_shared = 49152;
        close = end ? strchr(end, ')') : NULL;
        p = end ? end : name;
        while (close != NULL) {
            const char *decl = strstr(p, ".param");
            const char *line_end;
            char buffer[256];
            size_t n;
            if (decl == NULL || decl > close) break;
            line_end = strpbrk(decl, ",)");
            n = (size_t)(line_end - decl) < 255 ? (size_t)(line_end - decl) : 255;
            memcpy(buffer, decl + 6, n - 6);
            buffer[n - 6] = 0;
            f->sizes[f->nparams++] = ptx_param_size(buffer);
            p = line_end + 1;
        }
        p = close ? close : p;
    }
}

static int ptx_target_runs(const char *ptx) {
    const char *t = strstr(ptx, ".target sm_");
    int sm;
    if (t == NULL) return 1;
    sm = atoi(t + 11);
    if (t[11] && t[12] && t[13] == 'a') return sm == cc(); /* an `a` target: that sm only */
    return cc() >= sm;
}

static CUresult load(CUmodule *module, const void *image) {
    fake_module *m;
    const unsigned char *bytes = image;
    int cubin = bytes[0] == 0x7f && bytes[1] == 'E' && bytes[2] == 'L' && bytes[3] == 'F';
    char path[4096];
    const char *log = getenv("FAKE_CUDA_LOG");
    NEED_CONTEXT("cuModuleLoadData");
    if (cubin && getenv("FAKE_CUDA_REJECT_CUBIN") && atoi(getenv("FAKE_CUDA_REJECT_CUBIN")))
        return fail("cuModuleLoadData", CUDA_ERROR_NO_BINARY_FOR_GPU);
    if (!cubin && !ptx_target_runs(image)) return fail("cuModuleLoadData", CUDA_ERROR_NO_BINARY_FOR_GPU);
    m = calloc(1, sizeof *m);
    if (m == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
    m->id = ++modules_loaded;
    if (!cubin) parse_ptx(m, image);
    if (log != NULL && !cubin) {
        FILE *f;
        snprintf(path, sizeof path, "%s.image%d.ptx", log, m->id);
        f = fopen(path, "w");
        if (f != NULL) {
            fputs(image, f);
            fclose(f);
        }
    }
    say("load %d kind=%s", m->id, cubin ? "cubin" : "ptx");
    *module = (CUmodule)m;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image) { return load(module, image); }
CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int n, CUjit_option *options, void **values) {
    (void)n; (void)options; (void)values;
    return load(module, image);
}
CUresult CUDAAPI cuModuleUnload(CUmodule module) {
    NEED_CONTEXT("cuModuleUnload");
    if (module == NULL) return fail("cuModuleUnload", CUDA_ERROR_INVALID_HANDLE);
    say("unload %d", ((fake_module *)module)->id);
    free(module);
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleGetFunction(CUfunction *function, CUmodule module, const char *name) {
    fake_module *m = (fake_module *)module;
    int i;
    NEED_CONTEXT("cuModuleGetFunction");
    if (m == NULL) return fail("cuModuleGetFunction", CUDA_ERROR_INVALID_HANDLE);
    for (i = 0; i < m->nfunctions; ++i) {
        if (strcmp(m->functions[i].name, name) == 0) {
            *function = (CUfunction)&m->functions[i];
            return CUDA_SUCCESS;
        }
    }
    if (m->nfunctions == 0) { /* a cubin: parameters unknown */
        fake_function *f = &m->functions[m->nfunctions++];
        snprintf(f->name, sizeof f->name, "%s", name);
        f->nparams = -1;
        f->max_dynamic_shared = 49152;
        *function = (CUfunction)f;
        return CUDA_SUCCESS;
    }
    return fail("cuModuleGetFunction", CUDA_ERROR_NOT_FOUND);
}

CUresult CUDAAPI cuFuncSetAttribute(CUfunction function, CUfunction_attribute attr, int value) {
    fake_function *f = (fake_function *)function;
    int optin = cc() >= 90 ? 232448 : 166912;
    if (f == NULL) return fail("cuFuncSetAttribute", CUDA_ERROR_INVALID_HANDLE);
    if (attr == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
        if (value < 0 || value > optin) return fail("cuFuncSetAttribute", CUDA_ERROR_INVALID_VALUE);
        f->max_dynamic_shared = value;
    }
    say("attribute %s attr=%d value=%d", f->name, (int)attr, value);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction function, unsigned int gx, unsigned int gy, unsigned int gz,
                                unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                                CUstream stream, void **params, void **extra) {
    fake_function *f = (fake_function *)function;
    char line[65536];
    size_t used;
    int i, j;
    NEED_CONTEXT("cuLaunchKernel");
    if (f == NULL) return fail("cuLaunchKernel", CUDA_ERROR_INVALID_HANDLE);
    if (gx == 0 || gy == 0 || gz == 0 || gx > 2147483647u || gy > 65535u || gz > 65535u || bx == 0 || by == 0
        || bz == 0 || bx > 1024u || by > 1024u || bz > 64u || (unsigned long long)bx * by * bz > 1024u)
        return fail("cuLaunchKernel", CUDA_ERROR_INVALID_VALUE);
    if ((int)shared > f->max_dynamic_shared) return fail("cuLaunchKernel", CUDA_ERROR_INVALID_VALUE);
    if (extra != NULL || (f->nparams > 0 && params == NULL)) return fail("cuLaunchKernel", CUDA_ERROR_INVALID_VALUE);
    used = (size_t)snprintf(line, sizeof line, "launch %s grid=%u,%u,%u block=%u,%u,%u shared=%u stream=%llx params=",
                            f->name, gx, gy, gz, bx, by, bz, shared, (unsigned long long)(uintptr_t)stream);
    if (f->nparams < 0) used += (size_t)snprintf(line + used, sizeof line - used, "?");
    for (i = 0; i < f->nparams; ++i) {
        const unsigned char *bytes = params[i];
        if (i) line[used++] = ',';
        for (j = 0; j < f->sizes[i] && used + 3 < sizeof line; ++j) used += (size_t)snprintf(line + used, 3, "%02x", bytes[j]);
    }
    line[used] = 0;
    say("%s", line);
    return CUDA_SUCCESS;
}

static const char *join64(char *out, const cuuint64_t *v, cuuint32_t n) {
    size_t used = 0;
    cuuint32_t i;
    out[0] = 0;
    for (i = 0; i < n; ++i) used += (size_t)sprintf(out + used, "%s%llu", i ? "," : "", (unsigned long long)v[i]);
    return out;
}
static const char *join32(char *out, const cuuint32_t *v, cuuint32_t n) {
    size_t used = 0;
    cuuint32_t i;
    out[0] = 0;
    for (i = 0; i < n; ++i) used += (size_t)sprintf(out + used, "%s%u", i ? "," : "", v[i]);
    return out;
}

/* CU_TENSOR_MAP_DATA_TYPE_UINT8 .. TFLOAT32_FTZ, in cuda.h's order */
static const int element_bytes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};

CUresult CUDAAPI cuTensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, void *address,
                                        const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
                                        const cuuint32_t *steps, CUtensorMapInterleave interleave,
                                        CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                                        CUtensorMapFloatOOBfill oob) {
    char d[256], s[256], b[256], e[256], hex[1400];
    uint64_t hash = 1469598103934665603ull;
    cuuint32_t i;
    int span = swizzle == CU_TENSOR_MAP_SWIZZLE_32B ? 32 : swizzle == CU_TENSOR_MAP_SWIZZLE_64B ? 64 : swizzle == CU_TENSOR_MAP_SWIZZLE_128B ? 128 : 0;
    int eb = (int)type < 13 ? element_bytes[type] : 0;
    if (map == NULL || rank < 1 || rank > 5 || eb == 0 || ((uintptr_t)address % 16) != 0)
        return fail("cuTensorMapEncodeTiled", CUDA_ERROR_INVALID_VALUE);
    for (i = 0; i < rank; ++i) {
        if (dims[i] == 0 || dims[i] > ((cuuint64_t)1 << 32) || box[i] == 0 || box[i] > 256 || steps[i] == 0 || steps[i] > 8)
            return fail("cuTensorMapEncodeTiled", CUDA_ERROR_INVALID_VALUE);
        if (i + 1 < rank && (strides[i] % 16 != 0 || strides[i] >= ((cuuint64_t)1 << 40)))
            return fail("cuTensorMapEncodeTiled", CUDA_ERROR_INVALID_VALUE);
    }
    if (interleave == CU_TENSOR_MAP_INTERLEAVE_NONE && (box[0] * (cuuint32_t)eb) % 16 != 0)
        return fail("cuTensorMapEncodeTiled", CUDA_ERROR_INVALID_VALUE);
    if (span && box[0] * (cuuint32_t)eb > (cuuint32_t)span) return fail("cuTensorMapEncodeTiled", CUDA_ERROR_INVALID_VALUE);
    join64(d, dims, rank);
    join64(s, strides, rank - 1);
    join32(b, box, rank);
    join32(e, steps, rank);
    snprintf(hex, sizeof hex, "type=%d rank=%u base=%llx dims=%s strides=%s box=%s elem=%s interleave=%d swizzle=%d l2=%d oob=%d",
             (int)type, rank, (unsigned long long)(uintptr_t)address, d, rank > 1 ? s : "", b, e, (int)interleave,
             (int)swizzle, (int)l2, (int)oob);
    for (i = 0; hex[i]; ++i) hash = (hash ^ (unsigned char)hex[i]) * 1099511628211ull;
    for (i = 0; i < 16; ++i) {
        hash = (hash ^ i) * 1099511628211ull;
        map->opaque[i] = hash;
    }
    say("encode %s", hex);
    return CUDA_SUCCESS;
}

/* ---- what cuda-python looks up ---- */

typedef struct {
    const char *name;
    void *function;
} entry;

#define ENTRY(n, f) {n, (void *)(uintptr_t)&f}
static const entry table[] = {
    ENTRY("cuInit", cuInit), ENTRY("cuDriverGetVersion", cuDriverGetVersion), ENTRY("cuGetErrorName", cuGetErrorName),
    ENTRY("cuGetErrorString", cuGetErrorString), ENTRY("cuDeviceGetCount", cuDeviceGetCount),
    ENTRY("cuDeviceGet", cuDeviceGet), ENTRY("cuDeviceGetName", cuDeviceGetName),
    ENTRY("cuDeviceTotalMem", cuDeviceTotalMem), ENTRY("cuDeviceGetAttribute", cuDeviceGetAttribute),
    ENTRY("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain), ENTRY("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease),
    ENTRY("cuCtxSetCurrent", cuCtxSetCurrent), ENTRY("cuCtxGetCurrent", cuCtxGetCurrent), ENTRY("cuCtxGetDevice", cuCtxGetDevice),
    ENTRY("cuCtxPushCurrent", cuCtxPushCurrent), ENTRY("cuCtxPopCurrent", cuCtxPopCurrent),
    ENTRY("cuCtxSynchronize", cuCtxSynchronize), ENTRY("cuMemGetInfo", cuMemGetInfo), ENTRY("cuMemAlloc", cuMemAlloc),
    ENTRY("cuMemFree", cuMemFree), ENTRY("cuMemcpyHtoD", cuMemcpyHtoD), ENTRY("cuMemcpyDtoH", cuMemcpyDtoH),
    ENTRY("cuMemcpyDtoD", cuMemcpyDtoD), ENTRY("cuMemsetD8", cuMemsetD8), ENTRY("cuMemsetD8Async", cuMemsetD8Async),
    ENTRY("cuStreamCreate", cuStreamCreate), ENTRY("cuStreamDestroy", cuStreamDestroy),
    ENTRY("cuStreamSynchronize", cuStreamSynchronize), ENTRY("cuModuleLoadData", cuModuleLoadData),
    ENTRY("cuModuleLoadDataEx", cuModuleLoadDataEx), ENTRY("cuModuleUnload", cuModuleUnload),
    ENTRY("cuModuleGetFunction", cuModuleGetFunction), ENTRY("cuFuncSetAttribute", cuFuncSetAttribute),
    ENTRY("cuLaunchKernel", cuLaunchKernel), ENTRY("cuTensorMapEncodeTiled", cuTensorMapEncodeTiled),
};

CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                  CUdriverProcAddressQueryResult *status) {
    size_t i;
    (void)version; (void)flags;
    for (i = 0; i < sizeof table / sizeof table[0]; ++i) {
        if (strcmp(table[i].name, symbol) == 0) {
            *pfn = table[i].function;
            if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
            return CUDA_SUCCESS;
        }
    }
    *pfn = NULL;
    if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
}
