/* p2ptrace trace file format, version 1.10 (DESIGN.md §6). One file per traced process.
 *
 * The whole file is one MAP_SHARED mapping of a fixed size (P2PTRACE_MAX_MB), so whatever the
 * process wrote is in the page cache the moment it is written and survives SIGKILL, a crash or _exit.
 * Unwritten space is a hole and reads as zeros; the writer reserves the blocks of the header
 * region and of each chunk (fallocate) before touching them, so a full filesystem costs records
 * (counted, P2PTRACE_CAPTURE_NO_SPACE), never the process. All integers little-endian.
 *
 *   [0, 4096)                      p2ptrace_file_header
 *   [env_offset, +env_size)        allow-listed environment: "NAME=VALUE\0" strings, then zeros
 *   [counters_offset, +size)       p2ptrace_pair_counters[max_devices][max_devices][2]
 *                                  (src, dst, path: 0 direct, 1 host-staged); exact totals, updated
 *                                  with atomic adds, never dropped; [d][d] stays zero (a copy
 *                                  within one device is not peer traffic and is not counted)
 *   [chunks_offset, file_size)     chunk_size-byte chunks. A thread claims the next free chunk
 *                                  (atomic chunks_claimed) and appends records to it alone; a
 *                                  chunk's `used` is published after each record, so a reader sees
 *                                  only complete records.
 *
 * Readers must reject a newer major version, and skip record types and trailing fields they do not
 * know (minor versions only append).
 *
 * Minor versions: 1 added the header's timing counters and nccl_version, TEXT records (the
 * preflight block) and NCCL_CONN records. 2 added call sites (P2PTRACE_STACKS): a copy's and an
 * NCCL operation's `site` (formerly reserved, so 0 in older files), and TEXT blocks of kind
 * P2PTRACE_TEXT_CALL_SITE that describe each site once per file.
 * Also in 2: copy records written by the shim's fast path carry CPU ticks for a time
 * (P2PTRACE_COPY_TICKS), converted with CLOCK records and the header's *_ticks fields; untimed
 * copies and NCCL operations carry seq 0 (only a timed one needs a seq).
 * 3 added P2PTRACE_CAPTURE_NO_SPACE. 4 added P2PTRACE_CAPTURE_CUDART_DLSYM and
 * P2PTRACE_CAPTURE_NCCL_DLSYM (zero in older files: those calls were unseen then).
 * 5 added the driver API: P2PTRACE_API_cu* in copy and peer records (vocabulary.h) and
 * P2PTRACE_CAPTURE_DRIVER, _DRIVER_DLSYM, _DRIVER_ENTRY_POINT;
 * and CUDA graphs: a copy or NCCL operation issued on a stream being captured carries
 * P2PTRACE_COPY_CAPTURED / P2PTRACE_NCCL_CAPTURED and, in h.seq, its capture's graph id (it is never
 * timed, so the seq is free); it moved nothing and is not in the pair counters. GRAPH records name
 * the graph id of each capture's cudaGraph_t, of each instantiation, and of every launch: each
 * successful launch replays the graph id's captured copies and operations once (readers multiply).
 * 6 added graphs built node by node (copy and child graph nodes, clones: INCLUDE records, below).
 * 7 added the generic node calls (api cudaGraphAddNode / cuGraphAddNode) and GRAPH ALTERED records.
 * 8 added access grants to mapped and pool memory as peer records (api cuMemSetAccess,
 * cuMemPoolSetAccess; cudaMemPoolSetAccess's records now say the same): device = the device granted
 * access, peer = the memory's owner.
 * 9 added NCCL_KERNEL records (NCCL operations timed on the GPU by NCCL's profiler plugin interface,
 * p2ptrace_nccl_kernel_record) and P2PTRACE_CAPTURE_NCCL_PROFILER / _NCCL_PROFILER_USER.
 * 10 added what tells a stopped job apart (DESIGN.md §4 "When the job stops"): an NCCL operation is
 * recorded when it is called, its result P2PTRACE_RESULT_PENDING until the call returns (then the
 * real one; time_ns is the call's start, in CPU ticks when P2PTRACE_NCCL_TICKS), with its datatype;
 * a communicator init is recorded pending before it blocks; the watchdog's heartbeat in the header;
 * NCCL_PROGRESS records (the GPU finished a stream's NCCL work through a given operation, or had
 * not after P2PTRACE_HANG_S); ncclCommGetAsyncError's errors as NCCL_COMM records. */
#ifndef P2PTRACE_TRACE_FORMAT_H_
#define P2PTRACE_TRACE_FORMAT_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define P2PTRACE_MAGIC "P2PTRACE"
#define P2PTRACE_FORMAT_MAJOR 1
#define P2PTRACE_FORMAT_MINOR 11
#define P2PTRACE_MAX_DEVICES 32
#define P2PTRACE_CHUNK_MAGIC 0x4b4e4843u /* "CHNK" */

enum p2ptrace_process_state {
  P2PTRACE_STATE_RUNNING = 1,     /* still running, or killed without a chance to say so */
  P2PTRACE_STATE_EXITED = 2,      /* exit() or return from main */
  P2PTRACE_STATE_FATAL_SIGNAL = 3 /* a fatal signal reached the shim's handler */
};

/* What the shim could see (capture_flags). */
enum p2ptrace_capture_flag {
  P2PTRACE_CAPTURE_CUDART_11 = 1u << 0, /* calls reached wrappers for each runtime node */
  P2PTRACE_CAPTURE_CUDART_12 = 1u << 1,
  P2PTRACE_CAPTURE_CUDART_13 = 1u << 2,
  P2PTRACE_CAPTURE_NVML_LINKS = 1u << 3,   /* link types came from NVML */
  P2PTRACE_CAPTURE_FORK_CHILD = 1u << 4,   /* this process was forked from a traced parent */
  P2PTRACE_CAPTURE_TIMING_OFF = 1u << 5,   /* copy timing disabled by P2PTRACE_SAMPLE */
  P2PTRACE_CAPTURE_NCCL_TAP_WITHDRAWN = 1u << 6, /* the NCCL log tap was taken back at the first NCCL
                                                    call: this NCCL (2.13) ignores NCCL_DEBUG_FILE */
  P2PTRACE_CAPTURE_NO_SPACE = 1u << 7, /* (1.3) the trace's filesystem ran out of space: no chunk was
                                          claimed after that, its records are in dropped_records */
  /* (1.4) The program took functions the shim wraps through dlsym (a ctypes or dlopen'd runtime) and
   * libp2ptrace_audit.so (LD_AUDIT) handed it the shim's wrappers instead: its calls through them
   * are in this trace. Set at the dlsym, so a function taken and never called sets it too. */
  P2PTRACE_CAPTURE_CUDART_DLSYM = 1u << 8, /* a CUDA runtime function */
  P2PTRACE_CAPTURE_NCCL_DLSYM = 1u << 9,   /* an NCCL function */
  /* (1.5) the driver API: calls reached the shim's libcuda wrappers (P2PTRACE_API_cu*) */
  P2PTRACE_CAPTURE_DRIVER = 1u << 10,
  /* (1.5) a driver function was handed out through dlsym (the audit module), cuGetProcAddress or
   * cudaGetDriverEntryPoint* as the shim's wrapper (set when handed out, called or not) */
  P2PTRACE_CAPTURE_DRIVER_DLSYM = 1u << 11,
  P2PTRACE_CAPTURE_DRIVER_ENTRY_POINT = 1u << 12,
  /* (1.9) NCCL loaded libp2ptrace.so as its profiler plugin and initialised it for a communicator:
   * NCCL_KERNEL records time this process's sampled NCCL operations on the GPU */
  P2PTRACE_CAPTURE_NCCL_PROFILER = 1u << 13,
  /* (1.9) the program set NCCL_PROFILER_PLUGIN itself: its plugin was left in place, so NCCL's
   * operations were timed by events around their calls (per group) only */
  P2PTRACE_CAPTURE_NCCL_PROFILER_USER = 1u << 14
};

typedef struct p2ptrace_file_header {
  char magic[8]; /* "P2PTRACE" */
  uint16_t major, minor;
  uint32_t header_size;
  uint64_t file_size;
  uint32_t chunk_size, max_devices;
  uint64_t env_offset, env_size;
  uint64_t counters_offset, counters_size;
  uint64_t chunks_offset;
  /* updated while the process runs (atomically) */
  uint64_t chunks_claimed;
  uint64_t dropped_records; /* records that found no free chunk */
  uint32_t state;           /* p2ptrace_process_state */
  int32_t fatal_signal;
  uint32_t capture_flags;   /* p2ptrace_capture_flag */
  int32_t cuda_runtime_version, cuda_driver_version; /* 0 until known */
  int32_t device_count;     /* visible devices, once known */
  /* identity */
  int32_t pid, ppid;
  int32_t rank, local_rank, world_size, local_world_size; /* -1 when unknown */
  uint64_t start_realtime_ns, start_monotonic_ns, end_monotonic_ns;
  char host[64];
  char boot_id[40];
  char job_id[64];
  char exe[128];
  /* timing policy in force (P2PTRACE_SAMPLE) */
  uint32_t sample_first, sample_every;
  uint64_t sample_min_bytes;
  /* per visible device: PCI bus id ("0000:1a:00.0") when known */
  char bus_id[P2PTRACE_MAX_DEVICES][16];
  /* per directional pair, filled when the pair first copies: the transport a direct copy takes
   * (p2ptrace_transport: nvlink, pcie_p2p, or p2p when NVML could not say), and NVML's P2P READ
   * status + 1 (0 unknown; 1 OK; 2 chipset, 3 GPU, 4 IOH topology not supported, 5 disabled by
   * regkey, 6 not supported, 7 unknown) */
  uint8_t direct_transport[P2PTRACE_MAX_DEVICES][P2PTRACE_MAX_DEVICES];
  uint8_t nvml_p2p_status[P2PTRACE_MAX_DEVICES][P2PTRACE_MAX_DEVICES];
  /* Added in minor 1 (zero in older files). Copy timing, updated atomically: sampled copies and
   * NCCL operations left untimed (no free timing event pair because the resolver had not caught
   * up, its queue full, a stream capture running, the stream's device unknown); and the timing
   * event pairs made (at most 64 per runtime and device, then reused). */
  uint64_t timings_skipped;
  uint64_t timing_event_pairs;
  /* Added in minor 1 (zero in older files: the header page is zero-filled). ncclGetVersion's
   * answer (NCCL_VERSION_CODE, e.g. 21805), asked at the process's first NCCL call; 0 unknown. */
  int32_t nccl_version;
  uint32_t reserved_nccl;
  /* Added in minor 2. The CPU's counter (x86 TSC, arm64 CNTVCT) read together with
   * start_monotonic_ns, again ~200 us later with calib_monotonic_ns (its rate), and with
   * end_monotonic_ns at exit (0 until then). With the CLOCK record that starts every chunk, these
   * convert the time of records flagged P2PTRACE_COPY_TICKS into CLOCK_MONOTONIC ns. All 0 when
   * the CPU has no such counter (then no record carries ticks). */
  uint64_t start_ticks, calib_ticks, calib_monotonic_ns, end_ticks;
  /* Added in minor 10. The shim's watchdog thread, started at the process's first NCCL call, beats
   * every heartbeat_period_ms: CLOCK_MONOTONIC of its latest beat (0: no beat yet, or an older
   * file). A beat that stopped while the state is RUNNING: the process was stopped, killed or is
   * stuck in the kernel (a stopped process's threads all stop; a CPU-bound one still beats). */
  uint64_t heartbeat_ns;
  uint32_t heartbeat_period_ms, heartbeats;
  /* Added in minor 10: exit()'s status (on_exit), valid when exit_status_known is 1 (state EXITED). */
  int32_t exit_status;
  uint32_t exit_status_known;
} p2ptrace_file_header;

/* Minor 10: the result of an NCCL call that has not returned (yet, or ever: the process stopped or
 * died inside it). Never an ncclResult_t. */
#define P2PTRACE_RESULT_PENDING (-1)

typedef struct p2ptrace_pair_counters {
  uint64_t calls;       /* copies that succeeded */
  uint64_t bytes;
  uint64_t errors;      /* copies that returned an error */
  uint64_t timed_calls; /* the sampled subset with a measured duration */
  uint64_t timed_bytes;
  uint64_t timed_ns;
} p2ptrace_pair_counters;

typedef struct p2ptrace_chunk_header {
  uint32_t magic; /* P2PTRACE_CHUNK_MAGIC */
  uint32_t tid;
  uint64_t used;  /* bytes of complete records after this header */
} p2ptrace_chunk_header;

enum p2ptrace_record_type {
  P2PTRACE_RECORD_COPY = 1,
  P2PTRACE_RECORD_PEER = 2,
  P2PTRACE_RECORD_TIMING = 3,
  P2PTRACE_RECORD_IPC = 4,
  P2PTRACE_RECORD_NCCL_COMM = 5,
  P2PTRACE_RECORD_NCCL_OP = 6,
  P2PTRACE_RECORD_TEXT = 7, /* minor 1: a text block in parts (p2ptrace_text_record) */
  P2PTRACE_RECORD_NCCL_CONN = 8, /* minor 1: a connection NCCL logged (p2ptrace_nccl_conn_record) */
  P2PTRACE_RECORD_CLOCK = 10,    /* minor 2: the CPU counter and CLOCK_MONOTONIC read together
                                    (p2ptrace_clock_record), first in every chunk */
  P2PTRACE_RECORD_GRAPH = 11,    /* minor 5: a CUDA graph captured, instantiated, launched, updated or
                                    destroyed (p2ptrace_graph_record) */
  P2PTRACE_RECORD_NCCL_KERNEL = 12, /* minor 9: an NCCL operation's kernel timed on the GPU
                                      (p2ptrace_nccl_kernel_record) */
  P2PTRACE_RECORD_NCCL_PROGRESS = 13 /* minor 10: how far the GPU got with a stream's NCCL work
                                        (p2ptrace_nccl_progress_record) */
};

typedef struct p2ptrace_record_header {
  uint16_t type; /* p2ptrace_record_type */
  uint16_t size; /* of the whole record, a multiple of 8 */
  uint32_t seq;  /* per process from 1, in call order per thread; minor 2: 0 on an untimed copy or
                    NCCL operation (only a timed one needs a seq: its TIMING record's key) */
  uint64_t time_ns; /* CLOCK_MONOTONIC when recorded (a call's: when it returned); see P2PTRACE_COPY_TICKS */
} p2ptrace_record_header;

enum p2ptrace_copy_flag {
  P2PTRACE_COPY_ASYNC = 1u << 0,
  P2PTRACE_COPY_PER_THREAD_STREAM = 1u << 1, /* a _ptds/_ptsz entry point */
  P2PTRACE_COPY_TIMED = 1u << 2,             /* a TIMING record with this seq follows */
  P2PTRACE_COPY_IPC_MEMORY = 1u << 3,        /* one side was opened with cudaIpcOpenMemHandle */
  P2PTRACE_COPY_TICKS = 1u << 4,             /* minor 2: h.time_ns holds the CPU counter, not ns
                                                (the copy fast path: a call of clock_gettime costs
                                                more than the rest of the record); readers convert
                                                it with the header's and CLOCK records' anchors */
  P2PTRACE_COPY_CAPTURED = 1u << 5           /* minor 5: issued on a capturing stream: became a graph
                                                node and moved nothing; h.seq is the graph id; not in
                                                the pair counters (GRAPH launches replay it) */
};

/* A cross-device copy (same-device copies are not recorded). */
typedef struct p2ptrace_copy_record {
  p2ptrace_record_header h;
  uint64_t bytes;
  uint64_t stream;
  int32_t result;    /* cudaError_t */
  uint8_t api;       /* p2ptrace_api */
  int8_t src_device; /* visible ordinal; -1 unknown */
  int8_t dst_device;
  uint8_t transport; /* p2ptrace_transport: the path at that moment */
  uint32_t flags;    /* p2ptrace_copy_flag */
  uint32_t site;     /* minor 2: the call site (a P2PTRACE_TEXT_CALL_SITE block's tag); 0 not captured */
} p2ptrace_copy_record;

/* Added in minor 2: an anchor for converting CPU ticks (P2PTRACE_COPY_TICKS) to ns. h.time_ns is
 * CLOCK_MONOTONIC, read right after `ticks`; h.seq 0. */
typedef struct p2ptrace_clock_record {
  p2ptrace_record_header h;
  uint64_t ticks;
} p2ptrace_clock_record;

/* A capability query or a peer access change. */
typedef struct p2ptrace_peer_record {
  p2ptrace_record_header h;
  uint8_t api;
  int8_t device; /* the querying/current device */
  int8_t peer;
  uint8_t reserved0;
  int32_t result;
  int32_t value;  /* canAccessPeer / attribute value / flags (for an access grant: CUmemAccess_flags) */
  int32_t attr;   /* cudaDeviceP2PAttr for GetP2PAttribute */
} p2ptrace_peer_record;
/* Added in minor 8: api cuMemSetAccess / cuMemPoolSetAccess (and cudaMemPoolSetAccess, minor 0),
 * device = the device granted access, peer = the device owning the memory (-1 when the shim could
 * not tell), value = the flags (0: access taken away). A granted pair's copies go direct. */

/* The measured duration of a timed copy. */
typedef struct p2ptrace_timing_record {
  p2ptrace_record_header h;  /* seq: the copy's seq */
  uint64_t bytes;
  uint64_t duration_ns;
  int8_t src_device, dst_device;
  uint8_t transport, reserved0;
  uint32_t reserved1;
} p2ptrace_timing_record;

/* IPC export/import. */
typedef struct p2ptrace_ipc_record {
  p2ptrace_record_header h;
  uint8_t api;
  int8_t device;       /* current device */
  int8_t owner_device; /* device of the memory, when known */
  uint8_t reserved0;
  int32_t result;
  uint64_t address;
  uint64_t size;
} p2ptrace_ipc_record;

/* An NCCL communicator created, split or ended in this process. Minor 10: a blocking init
 * (ncclCommInitRank, …Config, …Scalable outside a group) is recorded when it is entered, with result
 * P2PTRACE_RESULT_PENDING, comm 0 and rank/nranks from its arguments, and completed in place when it
 * returns (result last). api ncclCommGetAsyncError: the error it reported for `comm` (once per comm
 * and value). */
typedef struct p2ptrace_nccl_comm_record {
  p2ptrace_record_header h;
  uint64_t comm;        /* the ncclComm_t value */
  uint64_t id_hash;     /* FNV-1a of the ncclUniqueId: the same for every rank of one communicator;
                           for a split, of the parent's hash, color and key order (ranks agree) */
  int32_t rank, nranks; /* -1 when the call failed before saying */
  int32_t cuda_device;  /* the current device at init, -1 unknown */
  int32_t result;       /* ncclResult_t */
  uint8_t api;          /* p2ptrace_nccl_api */
  uint8_t reserved[7];
  char bus_id[16];
} p2ptrace_nccl_comm_record;

enum p2ptrace_nccl_op_flag {
  P2PTRACE_NCCL_IN_GROUP = 1u << 0, /* issued between ncclGroupStart and ncclGroupEnd */
  P2PTRACE_NCCL_TIMED = 1u << 1,    /* a TIMING record with this seq follows (src = dst = -1); in a
                                       group, the ops of one stream share one seq and one TIMING: the
                                       whole group's launch (none follows when ncclGroupEnd failed) */
  P2PTRACE_NCCL_CAPTURED = 1u << 2, /* minor 5: issued on a capturing stream (a graph node); h.seq is
                                       the graph id; GRAPH launches replay it */
  P2PTRACE_NCCL_TICKS = 1u << 3     /* minor 10: h.time_ns holds the CPU counter (as P2PTRACE_COPY_TICKS) */
};

/* A collective or point-to-point operation. Minor 10: written when the call is made (h.time_ns its
 * start), `result` P2PTRACE_RESULT_PENDING until it returns; every call is recorded (never sampled),
 * so a communicator's records in call order number its operations as NCCL and PyTorch's Flight
 * Recorder do (readers count them: no counter costs the call). */
typedef struct p2ptrace_nccl_op_record {
  p2ptrace_record_header h;
  uint64_t comm;
  uint64_t stream;
  uint64_t bytes;  /* NCCL's count argument × the type's size: the whole send buffer of an allreduce,
                     broadcast, reduce or send (the receive buffer of a recv), one rank's block of an
                     allgather, reducescatter, gather or scatter, one peer's block of an alltoall
                     (nccl-tests' sizes are n of those: tools/report/nccl_bw.h) */
  int32_t peer;    /* send/recv peer, broadcast/reduce root; -1 otherwise */
  int32_t result;
  uint8_t api;     /* p2ptrace_nccl_api */
  uint8_t flags;   /* p2ptrace_nccl_op_flag */
  uint8_t datatype; /* minor 10: ncclDataType_t + 1; 0 unknown (older files) */
  uint8_t reserved0;
  uint32_t site;   /* minor 2: the call site, as in p2ptrace_copy_record; 0 not captured */
} p2ptrace_nccl_op_record;

/* Added in minor 1. A text block too long for one record, in parts: readers join the parts of one
 * `block` in `part` order. Kind 1 is the preflight block (core/preflight_block.h: what the node probes
 * found, the predicted path and causes of every GPU pair, the warnings printed at job start), as
 * "p2ptrace-preflight 1" then tab-separated lines.
 * Kind 2 (minor 2) describes one call site, written the first time a record of this file names it
 * (the writer's own records may reach the file first: readers join after reading every chunk).
 * `tag` is the site's id (from 1, per file; every part carries it); the text is its frames,
 * innermost first, one per line: "MODULE+0xOFFSET (SYMBOL+0xOFF)", OFFSET being the call
 * instruction's address (return address - 1) minus the module's load bias, so that
 * `addr2line -e MODULE OFFSET` names the line; " (SYMBOL+0xOFF)" is the nearest exported symbol,
 * demangled, left out when there is none. A site whose frames were not written (a crash in
 * between) has copies but no text: readers show its id alone.
 * Kind 3 (minor 11) is a reading of the node's link health (core/link_health.h: every NVLink's
 * state, speed and error counters, every PCIe port on the GPUs' way to their roots with its trained
 * width and AER counts), as "p2ptrace-links 1" then tab-separated lines; `tag` 0 is the reading at
 * job start, 1 the one at exit (a process that died has none). */
enum p2ptrace_text_kind { P2PTRACE_TEXT_PREFLIGHT = 1, P2PTRACE_TEXT_CALL_SITE = 2, P2PTRACE_TEXT_LINK_HEALTH = 3 };
enum p2ptrace_link_reading { P2PTRACE_LINKS_AT_START = 0, P2PTRACE_LINKS_AT_EXIT = 1 };
#define P2PTRACE_TEXT_PART_BYTES 4064
typedef struct p2ptrace_text_record {
  p2ptrace_record_header h;
  uint32_t block;  /* per process, from 1 */
  uint16_t part, parts;
  uint16_t kind;   /* p2ptrace_text_kind */
  uint16_t length; /* bytes of text used in this part */
  uint32_t tag;    /* minor 2, by kind: P2PTRACE_TEXT_CALL_SITE the site's id; 0 otherwise (formerly reserved) */
  char text[P2PTRACE_TEXT_PART_BYTES];
} p2ptrace_text_record;

/* Added in minor 1. One (channel, peer) connection of this process's NCCL, as NCCL's own INFO line
 * states it (`Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read`), read by the shim from NCCL's log
 * file (the log tap's, or the user's NCCL_DEBUG_FILE) after the wrapped NCCL call during which NCCL
 * wrote it, and at exit. Once per distinct connection; lines of other processes sharing the user's
 * file are left out. Text fields are NUL-padded and cut to their size (a cut transport sets
 * P2PTRACE_NCCL_CONN_CUT). Connections NCCL logs after the last wrapped call and before a kill are
 * only in the log file. */
enum p2ptrace_nccl_conn_direction {
  P2PTRACE_NCCL_CONN_UNTAGGED = 0, /* P2P/SHM lines carry no [send]/[receive] tag */
  P2PTRACE_NCCL_CONN_SEND = 1,
  P2PTRACE_NCCL_CONN_RECEIVE = 2
};
enum p2ptrace_nccl_conn_flag { P2PTRACE_NCCL_CONN_CUT = 1u << 0 /* `transport` was longer than the field */ };
typedef struct p2ptrace_nccl_conn_record {
  p2ptrace_record_header h;  /* time_ns: when the shim read the line, not when NCCL wrote it */
  char comm[24];       /* the logging rank's ncclComm as NCCL prints it ("0x7f9e54001060"), the same value
                          as p2ptrace_nccl_comm_record.comm; for a line that names none (lazy connect),
                          that of the communicator the grammar tied it to; "" when not known */
  char comm_id[24];    /* the communicator's id shared by its ranks (`commId 0x…`, NCCL >= 2.16; a split's
                          child without one: a key of the same form derived from its parent's, shared by
                          its ranks, core/nccl_log.h RankIdentity::comm_key); "" if none */
  char keyword[8];     /* "Channel", "Ring" (<= 2.6), "CollNet", "Coll" as printed */
  int32_t channel;
  int32_t conn_index;  /* the N of "Channel 00/N"; -1 when the format prints none */
  int32_t src_rank;    /* the communicator's ranks */
  int32_t dst_rank;    /* -1 for CollNet lines */
  uint8_t direction;   /* p2ptrace_nccl_conn_direction */
  uint8_t transport_class; /* p2ptrace_transport of the text (core's ClassifyNcclTransport) */
  uint8_t flags;       /* p2ptrace_nccl_conn_flag */
  uint8_t reserved0;
  uint32_t line;       /* the line's number in the log file, from 1 */
  char src_dev[16], dst_dev[16]; /* bracket contents as printed (busId hex, nvmlDev or cudaDev); "" if none */
  char transport[64];  /* NCCL's text after "via ", verbatim ("P2P/CUMEM/read", "NET/IB/0/GDRDMA") */
} p2ptrace_nccl_conn_record;

/* Added in minor 5. CUDA graphs, by the shim's graph id (per process, from 1: one per stream capture
 * the shim saw begin; only cudart 12/13 calls are flagged captured, cudart 11's count at capture as
 * before). A capture's id appears in the flagged copies and NCCL operations it captured, then here:
 *   END_CAPTURE  handle = the cudaGraph_t cudaStreamEndCapture returned (0 when it failed)
 *   INSTANTIATE  handle = the cudaGraphExec_t made from the graph of graph_id
 *   LAUNCH       handle = the exec launched on `stream`; graph_id its graph (the last update's);
 *                with result 0, the graph id's captured copies and operations ran once more.
 *                Written only for execs of graphs that captured something the shim records.
 *                h.seq is 0 unless P2PTRACE_GRAPH_TIMED (a TIMING record with src = dst = -1 and
 *                this seq follows: the whole launch's duration); h.time_ns in CPU ticks when
 *                P2PTRACE_GRAPH_TICKS (converted like P2PTRACE_COPY_TICKS)
 *   EXEC_UPDATE  cudaGraphExecUpdate: the exec `handle` now runs graph_id's work
 *   EXEC_DESTROY the exec `handle` is gone; GRAPH_DESTROY: the graph `handle`
 * Added in minor 6: graphs built node by node. A copy added as a node (cudaGraphAddMemcpyNode(1D),
 * cuGraphAddMemcpyNode) is recorded as a captured copy of its graph's id (P2PTRACE_COPY_CAPTURED,
 * the id in h.seq, api cudaGraphAddMemcpyNode*), whichever way the graph began. A graph id's work
 * never changes once an exec, a clone or a parent took it: a node added to such a graph gives the
 * graph a new id that INCLUDEs the old one.
 *   INCLUDE      graph_id's work also holds all of included_id's (a child graph node, a clone, a
 *                graph that grew after being instantiated, a capture into the program's graph);
 *                handle = the cudaGraph_t of graph_id
 * Added in minor 7: copy nodes added with the generic node call (api cudaGraphAddNode / cuGraphAddNode,
 * recorded as the copy node calls' are), and
 *   ALTERED      a node of recorded work may no longer be what was recorded: `api` (p2ptrace_api)
 *                changed a copy or child node's parameters, disabled or removed a node. handle = the
 *                exec and graph_id its graph id, or handle = the node and graph_id 0 (a graph's node:
 *                which graph is not known). Readers still replay what was recorded, and say so. */
enum p2ptrace_graph_event {
  P2PTRACE_GRAPH_END_CAPTURE = 1,
  P2PTRACE_GRAPH_INSTANTIATE = 2,
  P2PTRACE_GRAPH_LAUNCH = 3,
  P2PTRACE_GRAPH_EXEC_UPDATE = 4,
  P2PTRACE_GRAPH_EXEC_DESTROY = 5,
  P2PTRACE_GRAPH_DESTROY = 6,
  P2PTRACE_GRAPH_INCLUDE = 7, /* minor 6 */
  P2PTRACE_GRAPH_ALTERED = 8  /* minor 7 */
};
enum p2ptrace_graph_flag { P2PTRACE_GRAPH_TIMED = 1u << 0, P2PTRACE_GRAPH_TICKS = 1u << 1 };
typedef struct p2ptrace_graph_record {
  p2ptrace_record_header h;
  uint64_t handle;    /* cudaGraph_t or cudaGraphExec_t, by event */
  uint64_t stream;    /* LAUNCH, END_CAPTURE: the stream; 0 otherwise */
  uint32_t graph_id;  /* the shim's id of the capture (0: a graph the shim did not see captured) */
  int32_t result;     /* cudaError_t of the call */
  uint8_t event;      /* p2ptrace_graph_event */
  uint8_t flags;      /* p2ptrace_graph_flag */
  uint16_t api;       /* ALTERED (minor 7): the p2ptrace_api of the call; 0 otherwise (reserved before) */
  uint32_t included_id; /* INCLUDE (minor 6): the graph id whose work graph_id holds; 0 otherwise */
} p2ptrace_graph_record;

/* Added in minor 9. One sampled NCCL operation of one rank as NCCL's profiler plugin interface timed
 * it (NCCL >= 2.27, profiler ABI v4+; DESIGN.md §4): the GPU's own start and stop time of each
 * channel its kernel ran on (NCCL's KernelCh events, %globaltimer ns), summed up when the last
 * channel stopped. A send or receive is timed alone, inside a group too; a collective's channels
 * each carry one ring's or tree's share. Written by whichever thread NCCL reports the channels on
 * (its proxy or profiler thread); h.time_ns is when the last one reached the shim (CLOCK_MONOTONIC,
 * shortly after the kernel ended), h.seq 0. Sampled per communicator as P2PTRACE_SAMPLE says. */
enum p2ptrace_nccl_algo { P2PTRACE_NCCL_ALGO_UNKNOWN = 0, P2PTRACE_NCCL_ALGO_RING = 1, P2PTRACE_NCCL_ALGO_TREE = 2,
                          P2PTRACE_NCCL_ALGO_OTHER = 3 /* NVLS, CollNet, PAT, … */ };
enum p2ptrace_nccl_kernel_flag {
  P2PTRACE_NCCL_KERNEL_PARTIAL = 1u << 0 /* written when its communicator ended, before every channel it
                                            announced had stopped: the channels that did are in */
};
typedef struct p2ptrace_nccl_kernel_record {
  p2ptrace_record_header h;
  uint64_t comm_hash;     /* NCCL's commHash: the commId its log prints ("commId 0x%llx") */
  uint64_t bytes;         /* count × type size, as p2ptrace_nccl_op_record.bytes */
  uint64_t coll_seq;      /* a collective's sequence number for its function in the communicator; 0 send/recv */
  uint64_t channel_mask;  /* bit c: channel c's kernel was timed (c < 64) */
  uint64_t gpu_start_ns;  /* the earliest channel start (the GPU's %globaltimer) */
  uint64_t duration_ns;   /* the latest channel stop - gpu_start_ns */
  uint64_t channel_ns;    /* the sum over the timed channels of each one's stop - start */
  int32_t rank, nranks;   /* this rank in the communicator, its size (NCCL's init) */
  int32_t peer;           /* a send's or receive's peer, a broadcast's or reduce's root; -1 */
  uint8_t api;            /* p2ptrace_nccl_api (Send, Recv, AllReduce, …) */
  uint8_t channels;       /* channels timed (the bits of channel_mask) */
  uint8_t abi;            /* the profiler ABI version NCCL called (4-7) */
  uint8_t algo;           /* p2ptrace_nccl_algo of a collective; 0 for send/recv */
  uint32_t flags;         /* p2ptrace_nccl_kernel_flag */
  uint32_t reserved;
} p2ptrace_nccl_kernel_record;

/* Added in minor 10. The watchdog's view of one stream the process issued NCCL operations on (not
 * the legacy or per-thread default streams, which another thread cannot name). About once a
 * heartbeat it records one event on the stream behind the newest operation (never on a stream while
 * any capture runs, never waiting on it) and, when that event completes, writes DONE: every NCCL
 * operation of this process on `stream` recorded at or before `through` finished on the GPU.
 * STALLED: the operation recorded at `through` had been called `waited_ms` ago and had not finished
 * (written once per operation, when P2PTRACE_HANG_S passed; the shim printed its line then).
 * `through` is that operation's h.time_ns as its record holds it: CPU ticks when
 * P2PTRACE_PROGRESS_TICKS, converted by readers exactly as the operation's. h.seq 0. */
enum p2ptrace_nccl_progress_state { P2PTRACE_PROGRESS_DONE = 1, P2PTRACE_PROGRESS_STALLED = 2 };
enum p2ptrace_nccl_progress_flag { P2PTRACE_PROGRESS_TICKS = 1u << 0 };
typedef struct p2ptrace_nccl_progress_record {
  p2ptrace_record_header h;
  uint64_t stream;
  uint64_t comm;        /* the communicator of the operation at `through` */
  uint64_t through;     /* that operation's h.time_ns (see above) */
  uint64_t waited_ms;   /* STALLED: since that operation was called */
  uint8_t state;        /* p2ptrace_nccl_progress_state */
  uint8_t flags;        /* p2ptrace_nccl_progress_flag */
  uint8_t reserved[6];
} p2ptrace_nccl_progress_record;

#ifdef __cplusplus
}
#endif
#endif /* P2PTRACE_TRACE_FORMAT_H_ */
