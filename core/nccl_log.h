// The NCCL debug-log grammar (NCCL_DEBUG=INFO output of releases 2.2 → 2.30, from each release's
// format strings; tests/fixtures/nccl-logs holds real logs of every era with their sources): which transport NCCL chose for every (channel,
// peer) connection, which rank sits on which host and GPU, the NCCL version, the environment NCCL
// echoed, and the messages it prints when it refuses P2P.
//
// Incremental: Feed() takes any split of the input (lines cut anywhere, CRLF or LF), so a log tap
// can feed a file as it grows. Cost is O(bytes); memory is what the result keeps plus one line
// (capped at kMaxLineBytes). Lines it does not know are skipped, never fatal.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace p2ptrace {

// Who printed a line: NCCL's `host:pid:tid [cudaDev]` prefix. cuda_dev is the printing thread's
// current device, which is not always the rank's device (proxy threads print [0]).
struct NcclLogger {
  std::string host;  // short host name as printed ("" when the line had no NCCL prefix)
  int pid = -1, tid = -1, cuda_dev = -1;
  bool operator==(const NcclLogger&) const = default;
};

// One rank of one communicator, from `ncclCommInitRank comm 0x… rank R nranks N cudaDev D nvmlDev M
// busId B commId 0x… - Init START|COMPLETE` and its older forms, or a Destroy/Abort COMPLETE line.
struct RankIdentity {
  std::string comm;     // this rank's ncclComm pointer as printed ("0x7f9e54001060"); per rank
  std::string comm_id;  // the communicator's id shared by all its ranks ("0x9ca7…"); NCCL ≥ 2.16
  std::string api;      // "ncclCommInitRank", "ncclCommSplit", … ("" when the format has none)
  // ncclCommSplit/Shrink children (2.21+): the parent's comm pointer (same process), the split's
  // count (`splitCount` 2.24–2.28, `childCount` 2.29+; -1 when not printed) and color.
  std::string parent;
  int split_count = -1, color = -1;
  // The key every rank of this communicator shares, across processes and files, in commId's form
  // ("0x" and 16 hex digits, so it fits where a commId does, e.g. the trace's comm_id): the commId
  // when printed; for a split that prints none (2.23–2.31) p2ptrace's digest of the parent's key,
  // the split's count and its color (what NCCL hashes into the child's commHash, which it does not
  // print; the digest is not NCCL's); "" when the log cannot tell (a split whose parent's Init line
  // is not in the log; NCCL < 2.16).
  std::string comm_key;
  std::string parent_key;  // a split's: its parent's comm_key ("" when not a split or not known)
  int rank = -1, nranks = -1, cuda_dev = -1, nvml_dev = -1;
  std::string bus_id;   // as printed: hex without 0x ("1a000"); "" when the format has none (2.4)
  std::string host;     // from the line prefix
  int pid = -1;
  uint64_t start_line = 0, complete_line = 0, end_line = 0;  // Init START / Init COMPLETE / Destroy|Abort
  uint64_t FirstLine() const;
  bool operator==(const RankIdentity&) const = default;
};

// How a connection line was tied to its communicator (no NCCL line names it; see the .cc).
enum class Attribution {
  kNone,       // no communicator of the logging process fits the line
  kPrinted,    // the line names it (RCCL's ` comm 0x…` suffix)
  kInit,       // printed by the thread initializing it, between its Init START and COMPLETE
  kLazy,       // printed later (lazy connect): the only communicator of the process the line fits
  kThread,     // several fit; the one the printing thread last initialized or connected
  kAmbiguous,  // several fit equally (same rank, nranks and GPUs): the most recently created
};
std::string_view AttributionName(Attribution a);  // "none", "printed", "init", "lazy", "thread", "ambiguous"

// One `via` line. Rank numbers are the communicator's.
struct Connection {
  std::string comm;      // the logging rank's comm pointer; "" when the log does not say (see .cc)
  long identity = -1;    // index in NcclLog::ranks of that rank's identity (pointers are reused)
  Attribution attribution = Attribution::kNone;
  std::string keyword;   // "Channel", "Ring" (≤ 2.6), "CollNet", "Coll" (2.6–2.8) as printed
  int channel = -1;
  int conn_index = -1;   // the N of "Channel 00/N"; -1 when the format prints none
  int src_rank = -1;
  int dst_rank = -1;     // -1 for CollNet lines, which name only the logging rank (src_rank)
  std::string src_dev, dst_dev;  // bracket contents as printed (busId hex, nvmlDev or cudaDev); "" if none
  std::string transport;         // NCCL's transport text after "via " ("P2P/CUMEM/read", "NET/IB/0/GDRDMA", …)
  std::string note;              // what followed it that NCCL does not print (a note in a paste); "" none
  int transport_class = 0;       // p2ptrace_transport, from ClassifyNcclTransport(transport)
  std::string direction;         // "send", "receive", or "" (P2P/SHM lines carry no tag)
  NcclLogger logger;
  uint64_t line = 0;
  // The rank that printed the line: dst for [receive] (and 2.3's untagged NET lines), else src.
  int LoggingRank() const;
  bool operator==(const Connection&) const = default;
};

// `NAME set by environment to VALUE` (NCCL's echo of a parameter it read; a trailing '.' after a
// number is format, not value).
struct EnvSetting {
  std::string name, value;
  NcclLogger logger;
  uint64_t line = 0;
  bool operator==(const EnvSetting&) const = default;
};

// A message NCCL prints when it refuses P2P (or SHM/IB), verbatim.
struct Refusal {
  std::string kind;  // "cuda-no-peer-access", "nvml-p2p-disabled", "env-p2p-disabled", … (see .cc)
  std::string text;  // the message after the prefix
  NcclLogger logger;
  uint64_t line = 0;
  bool operator==(const Refusal&) const = default;
};

// A line worth showing but not a record of its own: WARN messages, `Check P2P Type …`, `NVLS
// multicast support …`, `Connected all rings …`.
struct NcclNote {
  std::string text;
  NcclLogger logger;
  uint64_t line = 0;
  bool operator==(const NcclNote&) const = default;
};

// A failed NCCL call as a line shows it: NCCLCHECK's INFO trace `file.cc:212 -> 2` (the return code
// passed up; ` (strerror)` or ` [Async thread]` may follow), or ncclGetErrorString's text anywhere
// in a line (the program's own report, e.g. PyTorch's `NCCL error in: …, unhandled system error
// (run with NCCL_DEBUG=INFO for details)`).
struct NcclResultLine {
  int code = -1;     // ncclResult_t
  std::string text;  // the message (the whole line for a program's line)
  NcclLogger logger;
  uint64_t line = 0;
  bool operator==(const NcclResultLine&) const = default;
};

struct VersionLine {
  std::string version;  // "2.27.5+cuda12.9"
  uint64_t line = 0;
  bool operator==(const VersionLine&) const = default;
};

// `Channel 00/02 :    0   1   2   3` (rank 0 prints the ring order of each channel).
struct RingOrder {
  std::string comm;
  int channel = -1, nchannels = -1;
  std::vector<int> ranks;  // as printed (2.5–2.22 print at most 20)
  NcclLogger logger;
  uint64_t line = 0;
  bool operator==(const RingOrder&) const = default;
};

// One `[c] …` group of a `Trees` line: the printing rank's tree neighbours on channel c.
struct TreeEntry {
  std::string comm;
  int channel = -1, rank = -1, parent = -1;
  std::vector<int> children;  // -1 entries dropped
  NcclLogger logger;
  uint64_t line = 0;
  bool operator==(const TreeEntry&) const = default;
};

struct NcclLog {
  std::string nccl_version;  // the first version line's; "" when none was printed
  std::vector<VersionLine> version_lines;
  std::vector<RankIdentity> ranks;
  std::vector<Connection> connections;
  std::vector<EnvSetting> env;
  std::vector<Refusal> refusals;
  std::vector<NcclNote> p2p_notes;  // Check P2P Type, NVLS multicast support
  std::vector<NcclNote> connected;  // Connected all rings/trees …
  std::vector<NcclNote> warnings;   // every NCCL WARN message
  // The network's lines, kept whole and read apart by core/nccl_net.h: `NET/… : Using …` device lines
  // (ParseNetDevices), GPUDirect RDMA decisions (ParseGdrDecision; a Disabled one is a refusal too)
  // with the GPU's DMA-BUF line (IsDmaBufAvailable), and the lines that say why the RDMA network is
  // unusable (NetFailureKind).
  std::vector<NcclNote> net_devices;
  std::vector<NcclNote> gdr;
  std::vector<NcclNote> net_failures;
  std::vector<NcclResultLine> results;  // failed return codes (see NcclResultLine)
  std::vector<RingOrder> rings;
  std::vector<TreeEntry> trees;
  uint64_t lines_read = 0;
  uint64_t nccl_lines = 0;     // lines with NCCL's prefix (or a bare `NCCL version` line)
  uint64_t lines_skipped = 0;  // lines that gave no record (other programs' output, NCCL lines it does not use)
  uint64_t long_lines = 0;     // lines cut at kMaxLineBytes

  // The identity of the rank that logged `c`, or nullptr.
  const RankIdentity* FindRank(const std::string& host, int pid, const std::string& comm) const;
  // The identity of the communicator a connection line was tied to (exact even when a comm
  // pointer was reused after a destroy), or nullptr.
  const RankIdentity* IdentityOf(const Connection& c) const;
  bool operator==(const NcclLog&) const = default;
};

// p2ptrace_transport of NCCL's transport text. P2P/* is `p2p` (NVLink vs PCIe is not in the log),
// P2P/indirect/… `p2p_indirect`, P2P/MNNVL `nvlink`, P2P/common device `same_device`, SHM/… and
// "direct shared memory" `shm`, NET/…/GDRDMA `net_gdr`, NET/Socket `net_socket`, other NET `net_ib`,
// COLLNET/… `collnet`, NVLS… `nvls`; anything else `unknown`.
int ClassifyNcclTransport(std::string_view transport);
// How many leading bytes of `text` (what follows "via ") are NCCL's transport, by the grammar of its
// format strings (p2p.cc, shm.cc, net.cc, coll_net.cc 2.3–2.31): `P2P/CUMEM|MNNVL|IPC|direct
// pointer|common device|indirect/R[D]` then `/read` `/CE`; `SHM/direct|CE[/direct|CE]`; `direct
// shared memory`; `NET/<name>/<dev>[(<proxy>)][/GDRDMA[(PCI)]][/GDCopy][/Shared][/flush=<type>]`;
// `COLLNET/<name>/<dev>[/GDRDMA[(PCI)]]`. Anything else: up to a note's start (` (`, ` #`, two spaces …).
size_t NcclTransportLength(std::string_view text);

class NcclLogParser {
 public:
  static constexpr size_t kMaxLineBytes = 64 * 1024;

  void Feed(std::string_view bytes);
  // The input ended: parses a last line without '\n' and settles the communicators that could only
  // be decided once the whole log was seen. Feed may continue afterwards (a file that grows again).
  void Finish();
  // Drops everything parsed so far but the release (the first version line, which later lines are
  // read by) and the line count: for a reader that follows a process's log for days, once none of
  // the communicators its lines named can print more (all destroyed, none initialising). Feed may
  // continue with the next line.
  void Forget();
  const NcclLog& log() const { return log_; }

 private:
  struct ThreadKey {
    std::string host;
    int pid, tid;
    bool operator<(const ThreadKey& o) const { return std::tie(host, pid, tid) < std::tie(o.host, o.pid, o.tid); }
  };
  enum class ItemKind { kConnection, kRing, kTree };
  struct Pending {
    ItemKind kind;
    size_t index;
    int logging_rank, max_rank;
    uint64_t line;
    int peer_rank = -1;             // the other rank of a connection line
    std::string own_dev, peer_dev;  // their bracket contents ("" none)
    std::string conn_key;           // (keyword, channel, index, src, dst, direction); "" when not unique per comm
    long thread_current = -1;       // the printing thread's current communicator when printed
  };
  struct ThreadState {
    // Communicators this thread is initializing (Init START seen, COMPLETE not yet), oldest first.
    // NCCL runs each init of a group on its own thread, so there is one; the sim starts several.
    std::vector<long> open;
    long current = -1;  // the communicator this thread last initialized or connected
    std::vector<Pending> awaiting_complete;  // printed with no open comm: NCCL < 2.18.3 prints
                                             // COMPLETE (and no START) after the init connections
  };

  void EndSegment();  // a '\r' or '\n' ended the bytes gathered in line_
  void EndLine();     // a '\n' ended the line
  void ParseSegment(std::string_view segment);
  bool ParseMessage(std::string_view message, bool is_warn, const NcclLogger& logger);
  bool ParseChannelLine(std::string_view message, const NcclLogger& logger);
  bool ParseIdentity(std::string_view message, const NcclLogger& logger);
  bool ParseTrees(std::string_view message, const NcclLogger& logger);
  bool ParseEnv(std::string_view message, const NcclLogger& logger);
  bool ParseRefusal(std::string_view message, const NcclLogger& logger);
  bool ParseNet(std::string_view message, const NcclLogger& logger);
  bool ParseResult(std::string_view message, const NcclLogger& logger, bool whole_line);
  void AddVersion(std::string_view version);
  void Attribute(Pending p, const NcclLogger& logger);
  // Ties a line printed outside any init of its thread to the process's communicator it fits.
  void Resolve(const Pending& p, const std::string& host, int pid, ThreadState* thread);
  void SetComm(const Pending& p, size_t identity, Attribution how);
  bool DevicesFit(const Pending& p, const RankIdentity& r) const;
  static bool Fits(const Pending& p, const RankIdentity& r);

  NcclLog log_;
  std::string line_;         // bytes of the current segment (up to kMaxLineBytes)
  bool line_cut_ = false;    // the current line exceeded kMaxLineBytes
  bool line_used_ = false;   // a segment of the current line gave a record
  bool line_nccl_ = false;   // a segment of the current line had NCCL's prefix
  bool line_open_ = false;   // bytes (or a '\r') of an unfinished line were seen
  std::map<ThreadKey, ThreadState> threads_;
  int version_code_ = -1;    // NcclVersionCode of the first version line
  // Items no thread rule could place yet, with the thread that printed them; settled in Finish().
  std::vector<std::pair<Pending, ThreadKey>> unresolved_;
  // (host, pid, comm) → index in log_.ranks
  std::map<std::tuple<std::string, int, std::string>, size_t> rank_index_;
  // (host, pid) → its identities, in order; and the processes that print Init START (NCCL ≥ 2.18.3).
  std::map<std::pair<std::string, int>, std::vector<size_t>> process_ranks_;
  std::set<std::pair<std::string, int>> start_printers_;
  // (comm_key, rank) → index in log_.ranks: the peer's identity, to check a line's peer device.
  std::map<std::pair<std::string, int>, size_t> key_rank_;
  // Per identity: the connection keys tied to it (NCCL connects each (channel, index, peer,
  // direction) once per communicator, so a repeat is another communicator's).
  std::map<size_t, std::set<std::string>> conn_keys_;
};

// Parses a whole text at once.
NcclLog ParseNcclLog(std::string_view text);

// One line of NCCL's own output, as NCCL_DEBUG prints it: which level's prefix it carries and the
// message after that prefix (the log tap decides from this which lines a user's level would show).
// kNone: no NCCL prefix (a bare VERSION-level line such as `NCCL version 2.28.9+cuda12.9`, a
// continuation of a multi-line message, or a blank line).
enum class NcclLineLevel { kNone, kInfo, kWarn, kTrace, kCall };
struct NcclLine {
  NcclLineLevel level = NcclLineLevel::kNone;
  std::string_view message;  // the text after the prefix (the whole line for kNone)
};
NcclLine ClassifyNcclLine(std::string_view line);
// The release in `NCCL version 2.21.5+cuda12.4` (anywhere in `text`) as 22105, or -1.
int NcclVersionCode(std::string_view text);

// The host name as NCCL prints it in its log lines and expands `%h` to (debug.cc getHostName(…, '.')):
// up to the first dot, "gpu01" for gpu01.cluster.local. Traces keep the whole name.
std::string_view NcclLogHost(std::string_view host);
// NCCL_DEBUG_FILE as NCCL expands it for a process: %h NcclLogHost(host), %p the pid, %% a '%'.
std::string ExpandNcclDebugFile(std::string_view pattern, std::string_view host, long pid);
// `text` as NCCL_DEBUG_FILE takes it verbatim: every '%' doubled (a trace directory named "run%p" is
// no pattern).
std::string NcclDebugFileLiteral(std::string_view text);

// The log tap's file in a trace directory (DESIGN.md §4), as the NCCL_DEBUG_FILE pattern the tap
// sets: "nccl.<host>.%p.log", the host whole (as the process's trace file names it; "host" when
// empty), made one path component ('/' and control bytes as '_'), its '%' doubled.
std::string NcclTapFilePattern(std::string_view host);
// Any NCCL log a trace directory holds: "nccl.*.log" (the tap's, or the user's own
// NCCL_DEBUG_FILE=<dir>/nccl.%h.%p.log).
bool IsNcclLogFileName(std::string_view file_name);
// The host of a log file named as the tap names its files, "nccl.<host>.<pid>.log"; "" for another
// name.
std::string NcclLogFileHost(std::string_view file_name);

}  // namespace p2ptrace
