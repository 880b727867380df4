/*
 * nvidia_smi.c - a fake `nvidia-smi` built on the simulated libnvidia-ml.so.1.
 *
 * It implements the part of nvidia-smi that fleet's fallback probe uses, with the real tool's
 * output format and exit codes, reading everything through NVML like the real one:
 *
 *     nvidia-smi --query-gpu=FIELD[,FIELD...] --format=csv[,noheader][,nounits] [-i N[,N...]]
 *     nvidia-smi -L | --list-gpus
 *     nvidia-smi                       (a driver line and a CSV summary instead of the table)
 *
 * Behaviour mirrored from the real tool:
 *   - one line per GPU, fields separated by ", "; memory in MiB, power in W with two decimals;
 *   - a field the GPU does not support prints "[N/A]" (drivers before 450 print
 *     "[Not Supported]"); other per-field failures print e.g. "[Unknown Error]";
 *   - a lost GPU prints "Unable to determine the device handle for GPU <id>: GPU is lost. ..."
 *     on stdout instead of its line, the other GPUs still print, and the exit code is 15;
 *   - when NVML cannot initialise, the driver message is printed on stdout and the exit code is
 *     the NVML return code (9 = driver not loaded);
 *   - an unknown field or bad option prints an error and exits with 2.
 *
 * Build: gcc -O2 -o nvidia-smi nvidia_smi.c -L<dir> -l:libnvidia-ml.so.1
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the NVML declarations used here (the real nvml.h prototypes) ----------------------- */

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;

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
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

nvmlReturn_t nvmlInitWithFlags(unsigned int flags);
nvmlReturn_t nvmlShutdown(void);
const char *nvmlErrorString(nvmlReturn_t result);
nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index);
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length);
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory);
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization);
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int *temperature);
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *milliwatts);
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *milliwatts);
nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed);
nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, int *pstate);
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned int *mhz);
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int error_type, int counter_type,
                                         unsigned long long *count);
nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, int *pending);

#define NVML_SUCCESS 0
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NO_PERMISSION 4
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_GPU_IS_LOST 15
#define NVML_TEMPERATURE_GPU 0
#define NVML_CLOCK_SM 1
#define NVML_CLOCK_MEM 2

#define EXIT_BAD_ARGUMENT 2
#define MAX_FIELDS 32
#define MAX_SELECTED 64
#define VALUE_SIZE 128
#define MIB (1024ull * 1024ull)

/* ---- query fields --------------------------------------------------------------------------- */

/* Formats one field of one GPU into `out`; `with_units` appends the unit like the real tool. */
typedef nvmlReturn_t (*field_reader)(nvmlDevice_t device, char *out, int with_units);

/* Appends " UNIT" when units are wanted. */
static void add_unit(char *out, int with_units, const char *unit)
{
    if (with_units) {
        strncat(out, " ", VALUE_SIZE - strlen(out) - 1);
        strncat(out, unit, VALUE_SIZE - strlen(out) - 1);
    }
}

static nvmlReturn_t read_index(nvmlDevice_t device, char *out, int with_units)
{
    unsigned int index = 0;
    nvmlReturn_t status = nvmlDeviceGetIndex(device, &index);
    (void)with_units;
    snprintf(out, VALUE_SIZE, "%u", index);
    return status;
}

static nvmlReturn_t read_uuid(nvmlDevice_t device, char *out, int with_units)
{
    (void)with_units;
    return nvmlDeviceGetUUID(device, out, VALUE_SIZE);
}

static nvmlReturn_t read_name(nvmlDevice_t device, char *out, int with_units)
{
    (void)with_units;
    return nvmlDeviceGetName(device, out, VALUE_SIZE);
}

static nvmlReturn_t read_pci_bus_id(nvmlDevice_t device, char *out, int with_units)
{
    nvmlPciInfo_t pci;
    nvmlReturn_t status = nvmlDeviceGetPciInfo_v3(device, &pci);
    (void)with_units;
    snprintf(out, VALUE_SIZE, "%s", pci.busId);
    return status;
}

static nvmlReturn_t read_driver_version(nvmlDevice_t device, char *out, int with_units)
{
    (void)device;
    (void)with_units;
    return nvmlSystemGetDriverVersion(out, VALUE_SIZE);
}

static nvmlReturn_t read_count(nvmlDevice_t device, char *out, int with_units)
{
    unsigned int count = 0;
    nvmlReturn_t status = nvmlDeviceGetCount_v2(&count);
    (void)device;
    (void)with_units;
    snprintf(out, VALUE_SIZE, "%u", count);
    return status;
}

/* Memory in whole MiB, as nvidia-smi prints it. */
static nvmlReturn_t read_memory(nvmlDevice_t device, char *out, int with_units, char which)
{
    nvmlMemory_t memory;
    nvmlReturn_t status = nvmlDeviceGetMemoryInfo(device, &memory);
    unsigned long long bytes = which == 't' ? memory.total : which == 'u' ? memory.used : memory.free;
    snprintf(out, VALUE_SIZE, "%llu", bytes / MIB);
    add_unit(out, with_units, "MiB");
    return status;
}

static nvmlReturn_t read_memory_total(nvmlDevice_t device, char *out, int with_units)
{
    return read_memory(device, out, with_units, 't');
}

static nvmlReturn_t read_memory_used(nvmlDevice_t device, char *out, int with_units)
{
    return read_memory(device, out, with_units, 'u');
}

static nvmlReturn_t read_memory_free(nvmlDevice_t device, char *out, int with_units)
{
    return read_memory(device, out, with_units, 'f');
}

static nvmlReturn_t read_utilization(nvmlDevice_t device, char *out, int with_units, int memory)
{
    nvmlUtilization_t utilization;
    nvmlReturn_t status = nvmlDeviceGetUtilizationRates(device, &utilization);
    snprintf(out, VALUE_SIZE, "%u", memory ? utilization.memory : utilization.gpu);
    add_unit(out, with_units, "%");
    return status;
}

static nvmlReturn_t read_utilization_gpu(nvmlDevice_t device, char *out, int with_units)
{
    return read_utilization(device, out, with_units, 0);
}

static nvmlReturn_t read_utilization_memory(nvmlDevice_t device, char *out, int with_units)
{
    return read_utilization(device, out, with_units, 1);
}

static nvmlReturn_t read_temperature(nvmlDevice_t device, char *out, int with_units)
{
    unsigned int celsius = 0;
    nvmlReturn_t status = nvmlDeviceGetTemperature(device, NVML_TEMPERATURE_GPU, &celsius);
    (void)with_units;
    snprintf(out, VALUE_SIZE, "%u", celsius);
    return status;
}

/* Milliwatts from NVML printed as watts with two decimals. */
static nvmlReturn_t print_watts(nvmlReturn_t status, unsigned int milliwatts, char *out,
                                int with_units)
{
    snprintf(out, VALUE_SIZE, "%.2f", milliwatts / 1000.0);
    add_unit(out, with_units, "W");
    return status;
}

static nvmlReturn_t read_power_draw(nvmlDevice_t device, char *out, int with_units)
{
    unsigned int milliwatts = 0;
    nvmlReturn_t status = nvmlDeviceGetPowerUsage(device, &milliwatts);
    return print_watts(status, milliwatts, out, with_units);
}

static nvmlReturn_t read_power_limit(nvmlDevice_t device, char *out, int with_units)
{
    unsigned int milliwatts = 0;
    nvmlReturn_t status = nvmlDeviceGetEnforcedPowerLimit(device, &milliwatts);
    return print_watts(status, milliwatts, out, with_units);
}

static nvmlReturn_t read_fan_speed(nvmlDevice_t device, char *out, int with_units)
{
    unsigned int speed = 0;
    nvmlReturn_t status = nvmlDeviceGetFanSpeed(device, &speed);
    snprintf(out, VALUE_SIZE, "%u", speed);
    add_unit(out, with_units, "%");
    return status;
}

static nvmlReturn_t read_pstate(nvmlDevice_t device, char *out, int with_units)
{
    int pstate = 0;
    nvmlReturn_t status = nvmlDeviceGetPerformanceState(device, &pstate);
    (void)with_units;
    if (pstate >= 0 && pstate <= 15)
        snprintf(out, VALUE_SIZE, "P%d", pstate);
    else
        snprintf(out, VALUE_SIZE, "[Unknown]");
    return status;
}

static nvmlReturn_t read_clock(nvmlDevice_t device, char *out, int with_units, int type)
{
    unsigned int mhz = 0;
    nvmlReturn_t status = nvmlDeviceGetClockInfo(device, type, &mhz);
    snprintf(out, VALUE_SIZE, "%u", mhz);
    add_unit(out, with_units, "MHz");
    return status;
}

static nvmlReturn_t read_clock_sm(nvmlDevice_t device, char *out, int with_units)
{
    return read_clock(device, out, with_units, NVML_CLOCK_SM);
}

static nvmlReturn_t read_clock_mem(nvmlDevice_t device, char *out, int with_units)
{
    return read_clock(device, out, with_units, NVML_CLOCK_MEM);
}

static nvmlReturn_t read_ecc(nvmlDevice_t device, char *out, int error_type, int counter_type)
{
    unsigned long long count = 0;
    nvmlReturn_t status = nvmlDeviceGetTotalEccErrors(device, error_type, counter_type, &count);
    snprintf(out, VALUE_SIZE, "%llu", count);
    return status;
}

static nvmlReturn_t read_ecc_corrected(nvmlDevice_t device, char *out, int with_units)
{
    (void)with_units;
    return read_ecc(device, out, 0, 0);
}

static nvmlReturn_t read_ecc_uncorrected(nvmlDevice_t device, char *out, int with_units)
{
    (void)with_units;
    return read_ecc(device, out, 1, 0);
}

static nvmlReturn_t read_retired_pending(nvmlDevice_t device, char *out, int with_units)
{
    int pending = 0;
    nvmlReturn_t status = nvmlDeviceGetRetiredPagesPendingStatus(device, &pending);
    (void)with_units;
    snprintf(out, VALUE_SIZE, "%s", pending ? "Yes" : "No");
    return status;
}

struct query_field {
    const char *name;
    const char *header; /* column title with unit, as the real tool prints it */
    field_reader read;
};

static const struct query_field query_fields[] = {
    {"index", "index", read_index},
    {"uuid", "uuid", read_uuid},
    {"name", "name", read_name},
    {"pci.bus_id", "pci.bus_id", read_pci_bus_id},
    {"driver_version", "driver_version", read_driver_version},
    {"count", "count", read_count},
    {"memory.total", "memory.total [MiB]", read_memory_total},
    {"memory.used", "memory.used [MiB]", read_memory_used},
    {"memory.free", "memory.free [MiB]", read_memory_free},
    {"utilization.gpu", "utilization.gpu [%]", read_utilization_gpu},
    {"utilization.memory", "utilization.memory [%]", read_utilization_memory},
    {"temperature.gpu", "temperature.gpu", read_temperature},
    {"power.draw", "power.draw [W]", read_power_draw},
    {"power.limit", "power.limit [W]", read_power_limit},
    {"fan.speed", "fan.speed [%]", read_fan_speed},
    {"pstate", "pstate", read_pstate},
    {"clocks.sm", "clocks.current.sm [MHz]", read_clock_sm},
    {"clocks.mem", "clocks.current.memory [MHz]", read_clock_mem},
    {"ecc.errors.corrected.volatile.total", "ecc.errors.corrected.volatile.total",
     read_ecc_corrected},
    {"ecc.errors.uncorrected.volatile.total", "ecc.errors.uncorrected.volatile.total",
     read_ecc_uncorrected},
    {"retired_pages.pending", "retired_pages.pending", read_retired_pending},
};

static const struct query_field *find_field(const char *name)
{
    for (size_t i = 0; i < sizeof(query_fields) / sizeof(query_fields[0]); i++)
        if (strcmp(query_fields[i].name, name) == 0)
            return &query_fields[i];
    return NULL;
}

/* ---- command line ----------------------------------------------------------------------- */

struct options {
    const struct query_field *fields[MAX_FIELDS];
    int field_count;
    int has_format;
    int header;
    int units;
    int list_gpus;
    int summary; /* no arguments: print the driver line and a summary of every GPU */
    unsigned int selected[MAX_SELECTED];
    int selected_count; /* 0 = all GPUs */
};

static void usage(FILE *stream)
{
    fprintf(stream,
            "Simulated NVIDIA System Management Interface (fleet test tool).\n\n"
            "    nvidia-smi --query-gpu=FIELD[,FIELD...] --format=csv[,noheader][,nounits]"
            " [-i N[,N...]]\n"
            "    nvidia-smi -L\n\nFields:");
    for (size_t i = 0; i < sizeof(query_fields) / sizeof(query_fields[0]); i++)
        fprintf(stream, " %s", query_fields[i].name);
    fprintf(stream, "\n");
}

/* Reads the comma-separated field names of --query-gpu; returns 0 or an exit code. */
static int parse_query(struct options *options, char *list)
{
    for (char *item = strtok(list, ","); item != NULL; item = strtok(NULL, ",")) {
        const struct query_field *field = find_field(item);
        if (field == NULL) {
            printf("Field \"%s\" is not a valid field to query.\n\n", item);
            return EXIT_BAD_ARGUMENT;
        }
        if (options->field_count >= MAX_FIELDS) {
            printf("Too many fields to query.\n");
            return EXIT_BAD_ARGUMENT;
        }
        options->fields[options->field_count++] = field;
    }
    return 0;
}

static int parse_format(struct options *options, char *list)
{
    int saw_csv = 0;
    for (char *item = strtok(list, ","); item != NULL; item = strtok(NULL, ",")) {
        if (strcmp(item, "csv") == 0)
            saw_csv = 1;
        else if (strcmp(item, "noheader") == 0)
            options->header = 0;
        else if (strcmp(item, "nounits") == 0)
            options->units = 0;
        else {
            printf("\"%s\" is not a valid format option.\n", item);
            return EXIT_BAD_ARGUMENT;
        }
    }
    if (!saw_csv) {
        printf("Only the \"csv\" format is supported.\n");
        return EXIT_BAD_ARGUMENT;
    }
    options->has_format = 1;
    return 0;
}

static int parse_ids(struct options *options, char *list)
{
    for (char *item = strtok(list, ","); item != NULL; item = strtok(NULL, ",")) {
        char *end = NULL;
        unsigned long index = strtoul(item, &end, 10);
        if (*item == '\0' || *end != '\0' || options->selected_count >= MAX_SELECTED) {
            printf("Invalid GPU id \"%s\".\n", item);
            return EXIT_BAD_ARGUMENT;
        }
        options->selected[options->selected_count++] = (unsigned int)index;
    }
    return 0;
}

/* Value of `--name=value` or `--name value`; NULL when `arg` is not that option. */
static char *option_value(int argc, char **argv, int *position, const char *name)
{
    size_t length = strlen(name);
    char *arg = argv[*position];
    if (strncmp(arg, name, length) != 0)
        return NULL;
    if (arg[length] == '=')
        return arg + length + 1;
    if (arg[length] == '\0' && *position + 1 < argc)
        return argv[++*position];
    return NULL;
}

static int parse_arguments(int argc, char **argv, struct options *options)
{
    memset(options, 0, sizeof(*options));
    options->header = 1;
    options->units = 1;
    for (int i = 1; i < argc; i++) {
        char *value = NULL;
        int status = 0;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(argv[i], "-L") == 0 || strcmp(argv[i], "--list-gpus") == 0) {
            options->list_gpus = 1;
        } else if ((value = option_value(argc, argv, &i, "--query-gpu")) != NULL) {
            status = parse_query(options, value);
        } else if ((value = option_value(argc, argv, &i, "--format")) != NULL) {
            status = parse_format(options, value);
        } else if ((value = option_value(argc, argv, &i, "--id")) != NULL
                   || (value = option_value(argc, argv, &i, "-i")) != NULL) {
            status = parse_ids(options, value);
        } else {
            printf("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n");
            return EXIT_BAD_ARGUMENT;
        }
        if (status != 0)
            return status;
    }
    if (options->field_count > 0 && !options->has_format) {
        printf("Option \"--format\" is required with \"--query-gpu\".\n");
        return EXIT_BAD_ARGUMENT;
    }
    if (options->field_count == 0 && !options->list_gpus) {
        /* No query: a CSV summary stands in for the real tool's box-drawn table. */
        static char summary[] = "index,name,temperature.gpu,pstate,power.draw,power.limit,"
                                "memory.used,memory.total,utilization.gpu";
        options->summary = 1;
        options->has_format = 1;
        return parse_query(options, summary);
    }
    return 0;
}

/* ---- output ----------------------------------------------------------------------------- */

/* What the real tool prints in place of a value NVML could not give. */
static const char *error_placeholder(nvmlReturn_t status, int old_driver)
{
    switch (status) {
    case NVML_ERROR_NOT_SUPPORTED:
        return old_driver ? "[Not Supported]" : "[N/A]";
    case NVML_ERROR_NO_PERMISSION:
        return "[Insufficient Permissions]";
    default:
        return "[Unknown Error]";
    }
}

/* Drivers before the R450 branch print "[Not Supported]" rather than "[N/A]". */
static int is_old_driver(void)
{
    char version[VALUE_SIZE];
    if (nvmlSystemGetDriverVersion(version, sizeof(version)) != NVML_SUCCESS)
        return 0;
    return atoi(version) < 450;
}

static void print_lost(unsigned int index, nvmlReturn_t status)
{
    printf("Unable to determine the device handle for GPU%u: %s. "
           "Reboot the system to recover this GPU\n", index, nvmlErrorString(status));
}

/* Prints one CSV line for the GPU; returns 0 or the NVML code that hid the whole GPU. */
static int print_gpu_line(const struct options *options, unsigned int index, int old_driver)
{
    nvmlDevice_t device = NULL;
    nvmlReturn_t status = nvmlDeviceGetHandleByIndex_v2(index, &device);
    if (status != NVML_SUCCESS) {
        print_lost(index, status);
        return status;
    }
    char line[MAX_FIELDS * (VALUE_SIZE + 2)] = "";
    for (int f = 0; f < options->field_count; f++) {
        char value[VALUE_SIZE] = "";
        status = options->fields[f]->read(device, value, options->units);
        if (status == NVML_ERROR_GPU_IS_LOST) {
            print_lost(index, status);
            return status;
        }
        if (f > 0)
            strcat(line, ", ");
        strcat(line, status == NVML_SUCCESS ? value : error_placeholder(status, old_driver));
    }
    printf("%s\n", line);
    return 0;
}

static int list_gpus(unsigned int count)
{
    int exit_code = 0;
    for (unsigned int index = 0; index < count; index++) {
        nvmlDevice_t device = NULL;
        char name[VALUE_SIZE] = "";
        char uuid[VALUE_SIZE] = "";
        nvmlReturn_t status = nvmlDeviceGetHandleByIndex_v2(index, &device);
        if (status == NVML_SUCCESS)
            status = nvmlDeviceGetName(device, name, sizeof(name));
        if (status == NVML_SUCCESS)
            status = nvmlDeviceGetUUID(device, uuid, sizeof(uuid));
        if (status != NVML_SUCCESS) {
            print_lost(index, status);
            exit_code = status;
            continue;
        }
        printf("GPU %u: %s (UUID: %s)\n", index, name, uuid);
    }
    return exit_code;
}

int main(int argc, char **argv)
{
    struct options options;
    int exit_code = parse_arguments(argc, argv, &options);
    if (exit_code != 0)
        return exit_code;

    nvmlReturn_t status = nvmlInitWithFlags(0);
    if (status == NVML_ERROR_DRIVER_NOT_LOADED) {
        printf("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.\n\n");
        return status;
    }
    if (status != NVML_SUCCESS) {
        printf("Failed to initialize NVML: %s\n", nvmlErrorString(status));
        return status;
    }
    unsigned int count = 0;
    status = nvmlDeviceGetCount_v2(&count);
    if (status != NVML_SUCCESS) {
        printf("Failed to get the GPU count: %s\n", nvmlErrorString(status));
        nvmlShutdown();
        return status;
    }

    if (options.list_gpus) {
        exit_code = list_gpus(count);
    } else {
        int old_driver = is_old_driver();
        if (options.summary) {
            char version[VALUE_SIZE] = "[N/A]";
            nvmlSystemGetDriverVersion(version, sizeof(version));
            printf("Simulated NVIDIA-SMI (fleet)    Driver Version: %s    GPUs: %u\n", version,
                   count);
        }
        if (options.header) {
            for (int f = 0; f < options.field_count; f++)
                printf("%s%s", f > 0 ? ", " : "", options.fields[f]->header);
            printf("\n");
        }
        for (unsigned int index = 0; index < count; index++) {
            int wanted = options.selected_count == 0;
            for (int s = 0; s < options.selected_count; s++)
                wanted |= options.selected[s] == index;
            if (!wanted)
                continue;
            int gpu_status = print_gpu_line(&options, index, old_driver);
            if (gpu_status != 0)
                exit_code = gpu_status;
        }
        for (int s = 0; s < options.selected_count; s++) {
            if (options.selected[s] >= count) {
                printf("No devices were found matching the id %u.\n", options.selected[s]);
                exit_code = 6;
            }
        }
    }
    nvmlShutdown();
    return exit_code;
}
