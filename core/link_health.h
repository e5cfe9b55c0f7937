// Link health: one reading of a node's NVLink and PCIe links (state, speed, width, error counters),
// what changed between two readings, and which GPU pairs' traffic crosses each link. The probe
// (probe/link_health.h) reads; the shim records a reading at job start and at exit, `doctor` one
// now and two around each pair of `doctor --test`; the report charges each change to the pairs whose
// path crosses the link. Pure: no file is opened.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace p2ptrace {

// One counter as read: unset when the GPU, the driver or the kernel does not give it (listed by
// name as unsupported, never read as 0: NVLink 5 GPUs answer other counters than NVLink 4's, and a
// VM may hide them all).
struct LinkCounter {
  std::string name;  // "replay", "recovery", "crc_flit", "crc_data", "aer_correctable", …
  std::optional<uint64_t> value;
};

// One NVLink of one GPU.
struct NvLinkHealth {
  int gpu = -1;         // the node's GPU index (NVML's)
  int link = -1;        // NVML's link number
  bool up = false;
  std::string remote;   // the bus id at the other end (a GPU's, or an NVSwitch's); "" unknown
  int version = -1;     // NVML's nvmlNvlinkVersion_t code; -1 unknown
  int speed_mbps = -1;  // the link's current speed in MB/s ("MBps", NVML field 164); -1 unknown
  std::vector<LinkCounter> counters;
};

// One PCIe port on a GPU's way to its root complex: the GPU itself or an upstream bridge, with the
// link it trained to its upstream port.
struct PciePortHealth {
  std::string bus_id;
  int gpu = -1;             // the GPU's index when the port is a GPU; -1 a bridge
  std::vector<int> below;   // the GPUs whose path to the root crosses this port (a GPU: itself)
  int gen = -1, max_gen = -1, width = -1, max_width = -1;  // -1 unknown
  std::vector<LinkCounter> counters;  // "replay" (NVML, a GPU's), "aer_correctable", "aer_nonfatal", "aer_fatal"
};

struct LinkHealth {
  std::string host;
  std::string when;          // "start", "exit", "before GPU0 -> GPU1", …
  double read_ms = -1;       // how long the reading took, measured by the reader
  std::vector<NvLinkHealth> nvlinks;  // the up links, and the down ones a GPU has
  std::vector<PciePortHealth> pcie;
  std::vector<std::string> notes;     // what could not be read, one line each ("NVML: not loaded")

  const NvLinkHealth* NvLink(int gpu, int link) const;
  const PciePortHealth* Port(std::string_view bus_id) const;
};

// Line-oriented text ("p2ptrace-links 1", then tab-separated records), as the trace and `doctor
// --json` keep a reading, and back. The parser skips records it does not know.
std::string SerializeLinkHealth(const LinkHealth& health);
Expected<LinkHealth> ParseLinkHealth(std::string_view text);

// A link where something is wrong: an error counter that moved between two readings, or a link
// trained below what it can do (fewer lanes, a lower generation, an NVLink down or slower than its
// peers).
struct LinkChange {
  enum class Kind { kErrors, kDowntrained };
  Kind kind = Kind::kErrors;
  bool nvlink = false;
  int gpu = -1;            // an NVLink's GPU, or the GPU port's index (-1 a bridge)
  int link = -1;           // an NVLink's number
  std::string bus_id;      // a PCIe port's bus id
  std::vector<int> below;  // a PCIe port's GPUs (PciePortHealth::below)
  std::string counter;     // kErrors: the counter's name
  uint64_t before = 0, after = 0;
  // kDowntrained: what it trained to and what it can do ("x8 of x16", "Gen3 of Gen5", "down"),
  // and whether it changed during the job (narrowed between the readings) or was so from the first.
  std::string trained;
  bool narrowed_between = false;
  bool gen_only = false;  // only the generation is lower: GPUs lower it when idle, so a weak sign alone

  std::string Where() const;  // "GPU2 NVLink 3", "GPU5 PCIe", "PCIe bridge 0000:17:00.0"
  std::string What() const;   // "replay +51200 (0 -> 51200)", "x4 of x16 (narrowed during the job)"
};

// Every change from `before` to `after` (the same node): counters that grew (a counter read in
// only one of them is no change), and links trained low in `after` (or in `before`, when `after`
// lacks the link).
std::vector<LinkChange> CompareLinkHealth(const LinkHealth& before, const LinkHealth& after);

// How a pair's bytes travel, as far as which links they cross.
enum class LinkRoute {
  kNvLink,      // direct over NVLink (the GPUs' links to each other, or to an NVSwitch)
  kPcieP2p,     // direct over PCIe: up from each GPU to their nearest common bridge
  kThroughHost  // staged in host memory, SHM or a NIC: each GPU's whole way to its root
};

// The route of a pair's path class (p2ptrace_transport) as far as links go; `link` is nvidia-smi's
// label of the pair ("NV6", "PIX") and tells a direct path of unknown class. Nullopt where the class
// does not say which links it crosses (through another GPU, unknown).
std::optional<LinkRoute> RouteOf(int transport, std::string_view link);

// Whether traffic between GPUs a and b (the node's indices; b -1 for a GPU whose peer is on another
// node) on `route` crosses the link of `change`. An NVLink whose remote is a GPU carries that pair
// only; one to an NVSwitch carries its GPU's NVLink traffic with every peer. The GPUs' bus ids are
// the reading's GPU ports'.
bool PairCrosses(const LinkChange& change, int a, int b, LinkRoute route, const LinkHealth& reading);

// The counters a reading did not get (unsupported, never 0), grouped by how many links or ports
// lacked them: "NVLink, all 144 links: crc_data, crc_flit", "PCIe, 2 of 12 ports: aer_correctable".
std::vector<std::string> UnsupportedCounters(const LinkHealth& reading);

// The fix, and what a vendor asks for before an RMA, for a change's kind.
std::string LinkChangeFix(const LinkChange& change);

}  // namespace p2ptrace
