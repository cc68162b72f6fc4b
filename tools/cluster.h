/* Cluster descriptions for kiln plan (tools/cluster.c): a device's peaks
 * (built-in tables for H200, H100 and A100 SXM, each value with its
 * source; the CPU this runs on, measured), how many of them a node holds,
 * how many nodes, and the links between them (bandwidth and latency
 * within a node and across nodes), plus the cost model's efficiencies per
 * kind of step. A cluster file overrides any of these (docs/guides/plan.md). */
#ifndef KILN_CLUSTER_H
#define KILN_CLUSTER_H

#include <stdbool.h>

typedef struct kl_device {
    const char *name;   /* "H200 SXM" */
    bool gpu;
    /* Dense peaks in FLOP/s: fp64, fp32 (no tensor cores), tf32, bf16, fp16. */
    double fp64, fp32, tf32, bf16, fp16;
    double mem_bw;      /* bytes/s: HBM (or the CPU's copy bandwidth) */
    double mem_bytes;   /* capacity per device */
    int sms;            /* streaming multiprocessors (CPU: cores) */
    double nvlink_bw;   /* bytes/s per GPU per direction (0: none) */
} kl_device;

/* Efficiencies of the cost model (fractions of a peak) and per-step
 * overheads; defaults in tools/cluster.c, each said where it comes from. */
typedef struct kl_cost_eff {
    double gemm;       /* of the dtype's peak FLOP/s */
    double attention;  /* of the dtype's peak FLOP/s */
    double kernel;     /* of mem_bw, for generated kernels */
    double link;       /* of a link's bandwidth, for collectives */
    double launch_s;   /* per kernel or GEMM */
    double micro_s;    /* per micro-batch: the host's loop (feed the inputs, read the loss) */
} kl_cost_eff;

typedef struct kl_cluster {
    char name[96];      /* "h200x8", "cpu", a file's path */
    kl_device dev;
    int per_node, nodes;
    double intra_bw, intra_lat; /* bytes/s per rank per direction, seconds */
    double inter_bw, inter_lat;
    int cores;          /* CPU: cores the ranks share (0: a device each) */
    kl_cost_eff eff;
    bool measured;      /* the device's peaks were measured here */
    double load;        /* CPU: the load average (1 minute) when they were measured (-1: unknown) */
} kl_cluster;

/* Reads SPEC: h200x8, h100x8, a100x8 (xN: GPUs per node; h200 alone is
 * x8), cpu or cpuxN (N ranks on this machine, one thread each), or the
 * path of a cluster file. nodes > 0 overrides the node count. 0, or -1
 * after an error (reported, naming the flag or the file's line). */
int kl_cluster_load(const char *spec, int nodes, kl_cluster *out);

/* One paragraph describing the cluster and where its numbers come from. */
char *kl_cluster_describe(const kl_cluster *c);

/* The dense peak of a precision setting's GEMMs ("fp32", "bf16", "fp16"). */
double kl_cluster_peak(const kl_cluster *c, const char *precision);

#endif
