#include "tools/report/gpu_index.h"

#include <iterator>

namespace p2ptrace::cli {

bool IsBusId(const std::string& b) { return b.size() == 12 && b[4] == ':' && b[7] == ':' && b[10] == '.'; }

void GpuIndex::AddProbed(const std::string& host, const std::string& bus, const PreflightGpu& gpu) {
  probed_[host].try_emplace(bus, gpu);
}

void GpuIndex::AddVisible(const std::string& host, const std::string& bus) { visible_[host].insert(bus); }

GpuRef GpuIndex::Ref(const std::string& host, const std::string& bus, int cuda) const {
  GpuRef g{host, bus, -1};
  g.cuda = cuda;
  if (auto n = probed_.find(host); n != probed_.end())
    if (auto it = n->second.find(bus); it != n->second.end()) {
      g.gpu = it->second.index;
      g.name = it->second.name;
      return g;
    }
  if (auto v = visible_.find(host); v != visible_.end())
    if (auto it = v->second.find(bus); it != v->second.end()) g.gpu = static_cast<int>(std::distance(v->second.begin(), it));
  return g;
}

}  // namespace p2ptrace::cli
