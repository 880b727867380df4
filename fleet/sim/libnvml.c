/*
 * libnvml.c - a simulated libnvidia-ml.so.1 for tests and the demo.
 *
 * It exports the NVML C functions that nvidia-ml-py (pynvml) and fleet's probe call, with the
 * real signatures and struct layouts, and answers them from a text file describing the GPUs of
 * one host.  Only the physical GPU is simulated: the unmodified pynvml loads this library like
 * the real one (CDLL("libnvidia-ml.so.1") through LD_LIBRARY_PATH).
 *
 * Build:  gcc -shared -fPIC -O2 -fvisibility=hidden -Wl,-soname,libnvidia-ml.so.1 \
 *             -o libnvidia-ml.so.1 libnvml.c -lpthread
 *
 * Configuration: the file named by $FLEET_SIM_NVML_CONFIG, written by fleet/sim/config.py:
 *
 *     fleet_sim_nvml=1                  format version, first non-comment line
 *     driver_version=550.54.15          host-wide values (before the first [gpu])
 *     cuda_driver_version=12040
 *     nvml_version=12.550.54.15
 *     init_error=0                      nonzero: nvmlInitWithFlags returns this code
 *     [gpu]                             one section per GPU, index = order in the file
 *     name=NVIDIA A100-SXM4-80GB
 *     memory_total_bytes=85899345920
 *     power_draw_w=61.25                watts; NVML reports milliwatts
 *     process=4242:1073741824           repeatable: pid:used bytes
 *     error=nvmlDeviceGetFanSpeed:3     repeatable: NVML function name:return code
 *     lost=1                            every function taking this GPU's handle returns 15
 *
 * The file is stat()ed on every call and re-read when its device, inode, size or mtime
 * changes, so a test can rewrite it (atomically) while a process holds NVML open.
 *
 * Error precedence for a device function: not initialised (1), bad handle (2), GPU index no
 * longer in the file (15), GPU lost (15), injected error for this function, then the value.
 * nvmlDeviceGetHandleByIndex_v2 is not affected by `lost` (so the GPU's index can still be
 * named); inject an error for it explicitly to simulate a GPU whose handle cannot be obtained.
 *
 * Deliberately not exported (callers see NVML_ERROR_FUNCTION_NOT_FOUND from pynvml):
 * everything not listed here, e.g. nvmlDeviceGetTotalEnergyConsumption.
 */

#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define NVML_API __attribute__((visibility("default")))

/* ---- NVML types and constants (values as in nvml.h / pynvml.py) ---------------------------- */

typedef int nvmlReturn_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

enum { NVML_TEMPERATURE_GPU = 0 };
enum { NVML_CLOCK_GRAPHICS = 0, NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2 };
enum { NVML_MEMORY_ERROR_TYPE_CORRECTED = 0, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1 };
enum { NVML_VOLATILE_ECC = 0, NVML_AGGREGATE_ECC = 1 };

/* The opaque device handle is a pointer to one of these (one per possible GPU index). */
struct nvmlDevice_st {
    unsigned int index;
};
typedef struct nvmlDevice_st *nvmlDevice_t;

/* nvmlPciInfo_t as filled by nvmlDeviceGetPciInfo_v3. */
typedef struct {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

#define NVML_MEMORY_V2_VERSION ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

/* nvmlProcessInfo_v3_t (same layout as v2). */
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

#define NVML_NO_INSTANCE_ID 0xFFFFFFFFu

/* ---- simulated state -------------------------------------------------------------------- */

#define SIM_MAX_GPUS 64
#define SIM_MAX_PROCESSES 64
#define SIM_MAX_ERRORS 32
#define SIM_TEXT_SIZE 96
#define SIM_LINE_SIZE 512
#define SIM_FORMAT_VERSION 1

struct sim_process {
    unsigned int pid;
    unsigned long long used_bytes;
};

struct sim_injected_error {
    char function[SIM_TEXT_SIZE];
    int code;
};

struct sim_gpu {
    char name[SIM_TEXT_SIZE];
    char uuid[SIM_TEXT_SIZE];
    char pci_bus_id[32];
    unsigned long long pci_device_id;
    unsigned long long pci_subsystem_id;
    unsigned long long memory_total_bytes;
    unsigned long long memory_used_bytes;
    unsigned long long utilization_gpu_pct;
    unsigned long long utilization_memory_pct;
    unsigned long long temperature_c;
    double power_draw_w;
    double power_limit_w;
    unsigned long long fan_speed_pct;
    unsigned long long performance_state;
    unsigned long long clock_sm_mhz;
    unsigned long long clock_mem_mhz;
    unsigned long long ecc_errors_corrected;
    unsigned long long ecc_errors_uncorrected;
    unsigned long long retired_pages_pending;
    unsigned long long lost;
    unsigned int process_count;
    struct sim_process processes[SIM_MAX_PROCESSES];
    unsigned int error_count;
    struct sim_injected_error errors[SIM_MAX_ERRORS];
};

struct sim_host {
    unsigned long long format_version;
    char driver_version[SIM_TEXT_SIZE];
    char nvml_version[SIM_TEXT_SIZE];
    unsigned long long cuda_driver_version;
    unsigned long long init_error;
    unsigned int gpu_count;
    struct sim_gpu gpus[SIM_MAX_GPUS];
};

/* Whether the configuration file could be used, and why not. */
enum sim_config_state { CONFIG_UNREAD, CONFIG_OK, CONFIG_UNSET, CONFIG_MISSING, CONFIG_INVALID };

static pthread_mutex_t sim_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sim_host sim_current;      /* the last successfully parsed file */
static struct sim_host sim_scratch;      /* parse target, copied to sim_current on success */
static enum sim_config_state sim_state = CONFIG_UNREAD;
static struct stat sim_seen;             /* identity of the file last looked at */
static int sim_init_count;               /* nvmlInit minus nvmlShutdown calls */
static struct nvmlDevice_st sim_handles[SIM_MAX_GPUS];

/* ---- config file parsing ---------------------------------------------------------------- */

enum sim_value_type { VALUE_TEXT, VALUE_UINT, VALUE_WATTS };

/* One `key=value` the parser understands: where it is stored and its upper bound. */
struct sim_key {
    const char *key;
    enum sim_value_type type;
    size_t offset;
    size_t size;                  /* buffer size for VALUE_TEXT */
    unsigned long long max_value; /* for VALUE_UINT */
};

#define U32_MAX 0xFFFFFFFFull
#define U64_MAX 0xFFFFFFFFFFFFFFFFull
#define HOST_TEXT(field) {#field, VALUE_TEXT, offsetof(struct sim_host, field), SIM_TEXT_SIZE, 0}
#define HOST_UINT(field, max) {#field, VALUE_UINT, offsetof(struct sim_host, field), 0, max}
#define GPU_TEXT(field) {#field, VALUE_TEXT, offsetof(struct sim_gpu, field), \
                         sizeof(((struct sim_gpu *)0)->field), 0}
#define GPU_UINT(field, max) {#field, VALUE_UINT, offsetof(struct sim_gpu, field), 0, max}
#define GPU_WATTS(field) {#field, VALUE_WATTS, offsetof(struct sim_gpu, field), 0, 0}

static const struct sim_key sim_host_keys[] = {
    HOST_TEXT(driver_version),
    HOST_TEXT(nvml_version),
    HOST_UINT(cuda_driver_version, 0x7FFFFFFFull),
    HOST_UINT(init_error, 0x7FFFFFFFull),
};

static const struct sim_key sim_gpu_keys[] = {
    GPU_TEXT(name),
    GPU_TEXT(uuid),
    GPU_TEXT(pci_bus_id),
    GPU_UINT(pci_device_id, U32_MAX),
    GPU_UINT(pci_subsystem_id, U32_MAX),
    GPU_UINT(memory_total_bytes, U64_MAX),
    GPU_UINT(memory_used_bytes, U64_MAX),
    GPU_UINT(utilization_gpu_pct, 100),
    GPU_UINT(utilization_memory_pct, 100),
    GPU_UINT(temperature_c, U32_MAX),
    GPU_WATTS(power_draw_w),
    GPU_WATTS(power_limit_w),
    GPU_UINT(fan_speed_pct, 100),
    GPU_UINT(performance_state, 32),
    GPU_UINT(clock_sm_mhz, U32_MAX),
    GPU_UINT(clock_mem_mhz, U32_MAX),
    GPU_UINT(ecc_errors_corrected, U64_MAX),
    GPU_UINT(ecc_errors_uncorrected, U64_MAX),
    GPU_UINT(retired_pages_pending, 1),
    GPU_UINT(lost, 1),
};

/* Parses an unsigned decimal or 0x-hex integer that fills the whole string. */
static int sim_parse_uint(const char *text, unsigned long long max_value,
                          unsigned long long *out)
{
    char *end = NULL;
    if (*text < '0' || *text > '9')
        return -1; /* no sign, space or empty value */
    if (text[0] == '0' && text[1] >= '0' && text[1] <= '9')
        return -1; /* a leading zero would mean octal to strtoull */
    errno = 0;
    unsigned long long value = strtoull(text, &end, 0);
    if (errno != 0 || *end != '\0' || value > max_value)
        return -1;
    *out = value;
    return 0;
}

/* Parses a finite, non-negative wattage that fits NVML's milliwatt counter. */
static int sim_parse_watts(const char *text, double *out)
{
    char *end = NULL;
    if (*text < '0' || *text > '9' || strpbrk(text, "xXpP") != NULL)
        return -1; /* plain decimal only: no sign, space, hex float, inf or nan */
    errno = 0;
    double value = strtod(text, &end);
    if (errno != 0 || *end != '\0' || !isfinite(value) || value < 0.0 || value * 1000.0 > 4e9)
        return -1;
    *out = value;
    return 0;
}

/* Stores `value` into the field `key` of `base` using `table`; returns 0, or -1 with `why` set. */
static int sim_store_key(const struct sim_key *table, size_t table_len, void *base,
                         const char *key, const char *value, const char **why)
{
    for (size_t i = 0; i < table_len; i++) {
        const struct sim_key *entry = &table[i];
        if (strcmp(entry->key, key) != 0)
            continue;
        char *field = (char *)base + entry->offset;
        switch (entry->type) {
        case VALUE_TEXT:
            if (strlen(value) >= entry->size) {
                *why = "value too long";
                return -1;
            }
            strcpy(field, value);
            return 0;
        case VALUE_UINT:
            if (sim_parse_uint(value, entry->max_value, (unsigned long long *)field) != 0) {
                *why = "not an unsigned integer in range";
                return -1;
            }
            return 0;
        case VALUE_WATTS:
            if (sim_parse_watts(value, (double *)field) != 0) {
                *why = "not a non-negative number of watts";
                return -1;
            }
            return 0;
        }
    }
    *why = "unknown key";
    return -1;
}

/* Parses `pid:bytes` or `function:code` (the two repeatable GPU keys). */
static int sim_store_list_item(struct sim_gpu *gpu, const char *key, const char *value,
                               const char **why)
{
    char left[SIM_LINE_SIZE];
    const char *colon = strrchr(value, ':');
    if (colon == NULL || (size_t)(colon - value) >= sizeof(left)) {
        *why = "expected two values separated by ':'";
        return -1;
    }
    memcpy(left, value, (size_t)(colon - value));
    left[colon - value] = '\0';
    unsigned long long number = 0;

    if (strcmp(key, "process") == 0) {
        unsigned long long pid = 0;
        if (gpu->process_count >= SIM_MAX_PROCESSES) {
            *why = "too many processes on one GPU";
            return -1;
        }
        if (sim_parse_uint(left, U32_MAX, &pid) != 0 || sim_parse_uint(colon + 1, U64_MAX, &number) != 0) {
            *why = "expected process=PID:BYTES";
            return -1;
        }
        gpu->processes[gpu->process_count].pid = (unsigned int)pid;
        gpu->processes[gpu->process_count].used_bytes = number;
        gpu->process_count++;
        return 0;
    }
    /* key == "error" */
    if (gpu->error_count >= SIM_MAX_ERRORS) {
        *why = "too many injected errors on one GPU";
        return -1;
    }
    if (left[0] == '\0' || strlen(left) >= SIM_TEXT_SIZE
        || sim_parse_uint(colon + 1, 0x7FFFFFFFull, &number) != 0 || number == 0) {
        *why = "expected error=FUNCTION:NONZERO_CODE";
        return -1;
    }
    strcpy(gpu->errors[gpu->error_count].function, left);
    gpu->errors[gpu->error_count].code = (int)number;
    gpu->error_count++;
    return 0;
}

/* Fills the host-wide defaults used when the file omits them. */
static void sim_host_defaults(struct sim_host *host)
{
    memset(host, 0, sizeof(*host));
    strcpy(host->driver_version, "550.54.15");
    strcpy(host->nvml_version, "12.550.54.15");
    host->cuda_driver_version = 12040;
}

/* Parses the whole file into `host`; on error prints `path:line: why` to stderr. */
static int sim_parse_file(const char *path, struct sim_host *host)
{
    FILE *file = fopen(path, "r");
    if (file == NULL) {
        fprintf(stderr, "fleet-sim-nvml: %s: %s\n", path, strerror(errno));
        return -1;
    }
    sim_host_defaults(host);
    char line[SIM_LINE_SIZE];
    int line_number = 0;
    int failed = 0;
    const char *why = NULL;
    struct sim_gpu *gpu = NULL;

    while (!failed && fgets(line, sizeof(line), file) != NULL) {
        line_number++;
        size_t length = strlen(line);
        if (length > 0 && line[length - 1] == '\n')
            line[--length] = '\0';
        else if (!feof(file)) {
            why = "line too long";
            failed = 1;
            break;
        }
        if (length > 0 && line[length - 1] == '\r')
            line[--length] = '\0';
        if (length == 0 || line[0] == '#')
            continue;
        if (host->format_version == 0) {
            /* The format line must come first so a foreign file is rejected early. */
            if (strcmp(line, "fleet_sim_nvml=1") != 0) {
                why = "expected 'fleet_sim_nvml=1' as the first line";
                failed = 1;
                break;
            }
            host->format_version = SIM_FORMAT_VERSION;
            continue;
        }
        if (strcmp(line, "[gpu]") == 0) {
            if (host->gpu_count >= SIM_MAX_GPUS) {
                why = "too many GPUs";
                failed = 1;
                break;
            }
            gpu = &host->gpus[host->gpu_count++];
            continue;
        }
        char *equals = strchr(line, '=');
        if (equals == NULL) {
            why = "expected key=value or [gpu]";
            failed = 1;
            break;
        }
        *equals = '\0';
        const char *key = line;
        const char *value = equals + 1;
        if (gpu == NULL)
            failed = sim_store_key(sim_host_keys, sizeof(sim_host_keys) / sizeof(sim_host_keys[0]),
                                   host, key, value, &why) != 0;
        else if (strcmp(key, "process") == 0 || strcmp(key, "error") == 0)
            failed = sim_store_list_item(gpu, key, value, &why) != 0;
        else
            failed = sim_store_key(sim_gpu_keys, sizeof(sim_gpu_keys) / sizeof(sim_gpu_keys[0]),
                                   gpu, key, value, &why) != 0;
    }
    if (!failed && ferror(file)) {
        why = strerror(errno);
        failed = 1;
    }
    if (!failed && host->format_version == 0) {
        why = "empty file (expected 'fleet_sim_nvml=1')";
        failed = 1;
    }
    fclose(file);
    if (failed) {
        fprintf(stderr, "fleet-sim-nvml: %s:%d: %s\n", path, line_number, why);
        return -1;
    }
    return 0;
}

/* Re-reads the config file if it changed since the last look. Caller holds sim_lock. */
static void sim_refresh_locked(void)
{
    const char *path = getenv("FLEET_SIM_NVML_CONFIG");
    if (path == NULL || path[0] == '\0') {
        if (sim_state != CONFIG_UNSET)
            fprintf(stderr, "fleet-sim-nvml: FLEET_SIM_NVML_CONFIG is not set\n");
        sim_state = CONFIG_UNSET;
        return;
    }
    struct stat now;
    if (stat(path, &now) != 0) {
        if (sim_state != CONFIG_MISSING)
            fprintf(stderr, "fleet-sim-nvml: %s: %s\n", path, strerror(errno));
        sim_state = CONFIG_MISSING;
        return;
    }
    if (sim_state != CONFIG_UNREAD && sim_state != CONFIG_UNSET && sim_state != CONFIG_MISSING
        && now.st_dev == sim_seen.st_dev && now.st_ino == sim_seen.st_ino
        && now.st_size == sim_seen.st_size && now.st_mtim.tv_sec == sim_seen.st_mtim.tv_sec
        && now.st_mtim.tv_nsec == sim_seen.st_mtim.tv_nsec)
        return; /* unchanged: keep the current state (good or invalid) */
    sim_seen = now;
    if (sim_parse_file(path, &sim_scratch) == 0) {
        memcpy(&sim_current, &sim_scratch, sizeof(sim_current));
        sim_state = CONFIG_OK;
    } else {
        sim_state = CONFIG_INVALID;
    }
}

/* Why the configuration is unusable, as an NVML return code. */
static nvmlReturn_t sim_config_status(void)
{
    switch (sim_state) {
    case CONFIG_OK:
        return NVML_SUCCESS;
    case CONFIG_UNSET:
    case CONFIG_MISSING:
        return NVML_ERROR_DRIVER_NOT_LOADED;
    default:
        return NVML_ERROR_UNKNOWN;
    }
}

/* ---- common entry checks ---------------------------------------------------------------- */

/* The host-wide values a system-level function may return (small enough for the stack). */
struct sim_system {
    char driver_version[SIM_TEXT_SIZE];
    char nvml_version[SIM_TEXT_SIZE];
    unsigned long long cuda_driver_version;
    unsigned int gpu_count;
};

/* Entry of every system-level function: refresh, require init, copy what the caller needs. */
static nvmlReturn_t sim_enter_system(struct sim_system *host_out)
{
    pthread_mutex_lock(&sim_lock);
    sim_refresh_locked();
    nvmlReturn_t status = NVML_SUCCESS;
    if (sim_init_count == 0)
        status = NVML_ERROR_UNINITIALIZED;
    else
        status = sim_config_status();
    if (status == NVML_SUCCESS) {
        memcpy(host_out->driver_version, sim_current.driver_version, SIM_TEXT_SIZE);
        memcpy(host_out->nvml_version, sim_current.nvml_version, SIM_TEXT_SIZE);
        host_out->cuda_driver_version = sim_current.cuda_driver_version;
        host_out->gpu_count = sim_current.gpu_count;
    }
    pthread_mutex_unlock(&sim_lock);
    return status;
}

/* The injected return code for `function` on `gpu`, or NVML_SUCCESS. */
static nvmlReturn_t sim_injected(const struct sim_gpu *gpu, const char *function)
{
    for (unsigned int i = 0; i < gpu->error_count; i++)
        if (strcmp(gpu->errors[i].function, function) == 0)
            return gpu->errors[i].code;
    return NVML_SUCCESS;
}

/* Whether `device` is exactly one of the handles nvmlDeviceGetHandleByIndex_v2 hands out. */
static int sim_valid_handle(nvmlDevice_t device)
{
    uintptr_t first = (uintptr_t)&sim_handles[0];
    uintptr_t address = (uintptr_t)device;
    return address >= first && address < first + sizeof(sim_handles)
           && (address - first) % sizeof(sim_handles[0]) == 0;
}

/* Entry of every function taking a device handle: checks in the documented order and copies
 * the GPU's current values into `gpu_out` so the caller needs no lock. */
static nvmlReturn_t sim_enter_device(const char *function, nvmlDevice_t device,
                                     struct sim_gpu *gpu_out)
{
    pthread_mutex_lock(&sim_lock);
    sim_refresh_locked();
    nvmlReturn_t status = NVML_SUCCESS;
    if (sim_init_count == 0)
        status = NVML_ERROR_UNINITIALIZED;
    else if (!sim_valid_handle(device))
        status = NVML_ERROR_INVALID_ARGUMENT;
    else if ((status = sim_config_status()) != NVML_SUCCESS)
        ; /* keep the config status */
    else if (device->index >= sim_current.gpu_count)
        status = NVML_ERROR_GPU_IS_LOST; /* the GPU vanished from a rewritten file */
    else if (sim_current.gpus[device->index].lost)
        status = NVML_ERROR_GPU_IS_LOST;
    else
        status = sim_injected(&sim_current.gpus[device->index], function);
    if (status == NVML_SUCCESS)
        memcpy(gpu_out, &sim_current.gpus[device->index], sizeof(*gpu_out));
    pthread_mutex_unlock(&sim_lock);
    return status;
}

/* Declares `gpu` and returns early unless the device checks pass. */
#define SIM_DEVICE_ENTRY(device)                                                  \
    struct sim_gpu gpu;                                                           \
    do {                                                                          \
        nvmlReturn_t entry_status = sim_enter_device(__func__, (device), &gpu);  \
        if (entry_status != NVML_SUCCESS)                                         \
            return entry_status;                                                  \
    } while (0)

/* Copies a NUL-terminated string into a caller buffer of `length` bytes, NVML style. */
static nvmlReturn_t sim_copy_text(char *buffer, unsigned int length, const char *text)
{
    if (buffer == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(text) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(buffer, text);
    return NVML_SUCCESS;
}

/* Watts from the config to NVML's milliwatts, rounded to nearest. */
static unsigned int sim_milliwatts(double watts)
{
    return (unsigned int)(watts * 1000.0 + 0.5);
}

/* ---- initialisation and errors ---------------------------------------------------------- */

NVML_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    pthread_mutex_lock(&sim_lock);
    sim_refresh_locked();
    nvmlReturn_t status = sim_config_status();
    if (status == NVML_SUCCESS && sim_current.init_error != 0)
        status = (nvmlReturn_t)sim_current.init_error;
    if (status == NVML_SUCCESS) {
        for (unsigned int i = 0; i < SIM_MAX_GPUS; i++)
            sim_handles[i].index = i;
        sim_init_count++;
    }
    pthread_mutex_unlock(&sim_lock);
    return status;
}

NVML_API nvmlReturn_t nvmlInit_v2(void)
{
    return nvmlInitWithFlags(0);
}

NVML_API nvmlReturn_t nvmlShutdown(void)
{
    pthread_mutex_lock(&sim_lock);
    nvmlReturn_t status = NVML_SUCCESS;
    if (sim_init_count == 0)
        status = NVML_ERROR_UNINITIALIZED;
    else
        sim_init_count--;
    pthread_mutex_unlock(&sim_lock);
    return status;
}

/* The strings libnvidia-ml returns (pynvml caches the same ones). */
NVML_API const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 11: return "Interrupt Request Issue";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 14: return "Corrupted infoROM";
    case 15: return "GPU is lost";
    case 16: return "GPU requires restart";
    case 17: return "The operating system has blocked the request.";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    case 19: return "In use by another client";
    case 20: return "Insufficient Memory";
    case 21: return "No data";
    case 23: return "Insufficient resources for request";
    case 24: return "Frequency not supported";
    case 25: return "Argument version mismatch";
    case 26: return "Deprecated";
    case 27: return "Not ready";
    case 28: return "GPU not found";
    case 29: return "Invalid state";
    default: return "Unknown Error";
    }
}

/* ---- system queries --------------------------------------------------------------------- */

NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    struct sim_system host;
    nvmlReturn_t status = sim_enter_system(&host);
    return status != NVML_SUCCESS ? status : sim_copy_text(version, length, host.driver_version);
}

NVML_API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    struct sim_system host;
    nvmlReturn_t status = sim_enter_system(&host);
    return status != NVML_SUCCESS ? status : sim_copy_text(version, length, host.nvml_version);
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cuda_driver_version)
{
    struct sim_system host;
    nvmlReturn_t status = sim_enter_system(&host);
    if (status != NVML_SUCCESS)
        return status;
    if (cuda_driver_version == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *cuda_driver_version = (int)host.cuda_driver_version;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cuda_driver_version)
{
    return nvmlSystemGetCudaDriverVersion(cuda_driver_version);
}

/* ---- device enumeration ----------------------------------------------------------------- */

NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *device_count)
{
    struct sim_system host;
    nvmlReturn_t status = sim_enter_system(&host);
    if (status != NVML_SUCCESS)
        return status;
    if (device_count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device_count = host.gpu_count;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    pthread_mutex_lock(&sim_lock);
    sim_refresh_locked();
    nvmlReturn_t status = NVML_SUCCESS;
    if (sim_init_count == 0)
        status = NVML_ERROR_UNINITIALIZED;
    else if ((status = sim_config_status()) != NVML_SUCCESS)
        ; /* keep the config status */
    else if (device == NULL || index >= sim_current.gpu_count)
        status = NVML_ERROR_INVALID_ARGUMENT;
    else
        status = sim_injected(&sim_current.gpus[index], __func__);
    if (status == NVML_SUCCESS)
        *device = &sim_handles[index];
    pthread_mutex_unlock(&sim_lock);
    return status;
}

NVML_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    SIM_DEVICE_ENTRY(device);
    (void)gpu;
    if (index == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = device->index;
    return NVML_SUCCESS;
}

/* ---- identity ------------------------------------------------------------------------------ */

NVML_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    SIM_DEVICE_ENTRY(device);
    return sim_copy_text(name, length, gpu.name);
}

NVML_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    SIM_DEVICE_ENTRY(device);
    return sim_copy_text(uuid, length, gpu.uuid);
}

NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    SIM_DEVICE_ENTRY(device);
    if (pci == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int domain = 0, bus = 0, slot = 0, function = 0;
    memset(pci, 0, sizeof(*pci));
    /* "DDDDDDDD:BB:SS.F"; an unparsable id leaves the numeric fields zero. */
    if (sscanf(gpu.pci_bus_id, "%x:%x:%x.%x", &domain, &bus, &slot, &function) == 4) {
        pci->domain = domain;
        pci->bus = bus;
        pci->device = slot;
    }
    pci->pciDeviceId = (unsigned int)gpu.pci_device_id;
    pci->pciSubSystemId = (unsigned int)gpu.pci_subsystem_id;
    snprintf(pci->busId, sizeof(pci->busId), "%s", gpu.pci_bus_id);
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.%X",
             domain & 0xFFFFu, bus & 0xFFu, slot & 0xFFu, function & 0xFu);
    return NVML_SUCCESS;
}

/* ---- memory and utilisation ------------------------------------------------------------- */

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    SIM_DEVICE_ENTRY(device);
    if (memory == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long used = gpu.memory_used_bytes;
    unsigned long long total = gpu.memory_total_bytes;
    memory->total = total;
    memory->used = used;
    memory->free = used < total ? total - used : 0;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    SIM_DEVICE_ENTRY(device);
    if (memory == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != NVML_MEMORY_V2_VERSION)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned long long used = gpu.memory_used_bytes;
    unsigned long long total = gpu.memory_total_bytes;
    memory->total = total;
    memory->reserved = 0; /* the simulated driver reserves nothing, so v1 and v2 agree */
    memory->used = used;
    memory->free = used < total ? total - used : 0;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                    nvmlUtilization_t *utilization)
{
    SIM_DEVICE_ENTRY(device);
    if (utilization == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    utilization->gpu = (unsigned int)gpu.utilization_gpu_pct;
    utilization->memory = (unsigned int)gpu.utilization_memory_pct;
    return NVML_SUCCESS;
}

/* ---- thermals and power ----------------------------------------------------------------- */

NVML_API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor,
                                               unsigned int *temperature)
{
    SIM_DEVICE_ENTRY(device);
    if (temperature == NULL || sensor != NVML_TEMPERATURE_GPU)
        return NVML_ERROR_INVALID_ARGUMENT;
    *temperature = (unsigned int)gpu.temperature_c;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *milliwatts)
{
    SIM_DEVICE_ENTRY(device);
    if (milliwatts == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *milliwatts = sim_milliwatts(gpu.power_draw_w);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device,
                                                      unsigned int *milliwatts)
{
    SIM_DEVICE_ENTRY(device);
    if (milliwatts == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *milliwatts = sim_milliwatts(gpu.power_limit_w);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device,
                                                        unsigned int *milliwatts)
{
    SIM_DEVICE_ENTRY(device);
    if (milliwatts == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *milliwatts = sim_milliwatts(gpu.power_limit_w);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed)
{
    SIM_DEVICE_ENTRY(device);
    if (speed == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *speed = (unsigned int)gpu.fan_speed_pct;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, int *pstate)
{
    SIM_DEVICE_ENTRY(device);
    if (pstate == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *pstate = (int)gpu.performance_state;
    return NVML_SUCCESS;
}

/* Graphics and SM clocks are the same domain on the simulated GPU; video is not simulated. */
NVML_API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned int *mhz)
{
    SIM_DEVICE_ENTRY(device);
    if (mhz == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    switch (type) {
    case NVML_CLOCK_GRAPHICS:
    case NVML_CLOCK_SM:
        *mhz = (unsigned int)gpu.clock_sm_mhz;
        return NVML_SUCCESS;
    case NVML_CLOCK_MEM:
        *mhz = (unsigned int)gpu.clock_mem_mhz;
        return NVML_SUCCESS;
    default:
        return NVML_ERROR_NOT_SUPPORTED;
    }
}

/* ---- health --------------------------------------------------------------------------------- */

/* Volatile and aggregate counters report the same totals (no reboot is simulated). */
NVML_API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int error_type,
                                                  int counter_type,
                                                  unsigned long long *count)
{
    SIM_DEVICE_ENTRY(device);
    if (count == NULL || (counter_type != NVML_VOLATILE_ECC && counter_type != NVML_AGGREGATE_ECC))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (error_type == NVML_MEMORY_ERROR_TYPE_CORRECTED)
        *count = gpu.ecc_errors_corrected;
    else if (error_type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
        *count = gpu.ecc_errors_uncorrected;
    else
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, int *pending)
{
    SIM_DEVICE_ENTRY(device);
    if (pending == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *pending = gpu.retired_pages_pending ? 1 : 0;
    return NVML_SUCCESS;
}

/* ---- processes ------------------------------------------------------------------------------ */

/* Two-call pattern: with too small a buffer (count 0, infos NULL) the count is set and
 * INSUFFICIENT_SIZE returned, or SUCCESS when there are no processes. */
NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                              unsigned int *info_count,
                                                              nvmlProcessInfo_t *infos)
{
    SIM_DEVICE_ENTRY(device);
    if (info_count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int capacity = *info_count;
    *info_count = gpu.process_count;
    if (gpu.process_count == 0)
        return NVML_SUCCESS;
    if (capacity < gpu.process_count)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    if (infos == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < gpu.process_count; i++) {
        infos[i].pid = gpu.processes[i].pid;
        infos[i].usedGpuMemory = gpu.processes[i].used_bytes;
        infos[i].gpuInstanceId = NVML_NO_INSTANCE_ID;
        infos[i].computeInstanceId = NVML_NO_INSTANCE_ID;
    }
    return NVML_SUCCESS;
}
