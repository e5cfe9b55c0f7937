#include "core/scheduler.h"

#include <cerrno>
#include <cstdlib>
#include <string_view>

namespace p2ptrace {
namespace {

int ParseRank(const char* v) {
  if (v == nullptr || *v < '0' || *v > '9') return -1;
  errno = 0;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  return errno == 0 && *end == '\0' && x < (1L << 30) ? static_cast<int>(x) : -1;
}

}  // namespace

const std::vector<const char*>& SchedulerVariables() {
  static const std::vector<const char*> names = {
      // SLURM
      "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURMD_NODENAME",
      // torchrun (torch.distributed.run / torchelastic)
      "TORCHELASTIC_RUN_ID", "RANK", "LOCAL_RANK", "WORLD_SIZE",
      // Open MPI 4 (ORTE) and 5 (PRRTE, PMIx), other PMIx/PMI launchers
      "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_MCA_orte_ess_jobid",
      "PMIX_NAMESPACE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE",
      // Kubernetes: the service host is set in every pod; the rest come from the downward API
      "KUBERNETES_SERVICE_HOST", "POD_NAME", "POD_NAMESPACE", "NODE_NAME", "HOSTNAME", "JOB_COMPLETION_INDEX",
      // other batch systems' job ids
      "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID"};
  return names;
}

SchedulerIds ReadSchedulerIds(const std::function<const char*(const char*)>& get) {
  auto env = [&](const char* name) -> const char* {
    const char* v = get(name);
    return v != nullptr && *v != '\0' ? v : nullptr;
  };
  auto first_rank = [&](std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (int r = ParseRank(env(n)); r >= 0) return r;
    return -1;
  };
  SchedulerIds s;
  bool k8s = env("KUBERNETES_SERVICE_HOST") != nullptr;
  bool ompi = env("OMPI_COMM_WORLD_RANK") != nullptr || env("OMPI_MCA_orte_ess_jobid") != nullptr;
  if (const char* v = env("TORCHELASTIC_RUN_ID"); v && std::string_view(v) != "none") s.run_id = v;
  // The batch job outermost: it names the allocation every launcher inside it shares.
  struct Source {
    const char* scheduler;
    const char* job_var;
  };
  for (const Source& src : {Source{"slurm", "SLURM_JOB_ID"}, Source{"pbs", "PBS_JOBID"}, Source{"lsf", "LSB_JOBID"},
                            Source{"flux", "FLUX_JOB_ID"}})
    if (const char* v = env(src.job_var)) {
      s.scheduler = src.scheduler;
      s.job_id = v;
      break;
    }
  if (s.scheduler.empty() && k8s) s.scheduler = "kubernetes";
  if (s.scheduler.empty() && ompi) s.scheduler = "openmpi";
  if (s.scheduler.empty() && env("PMIX_NAMESPACE")) s.scheduler = "pmix";
  if (s.scheduler.empty() && !s.run_id.empty()) s.scheduler = "torchrun";
  if (s.job_id.empty())
    for (const char* n : {"OMPI_MCA_orte_ess_jobid", "PMIX_NAMESPACE"})
      if (const char* v = env(n)) {
        s.job_id = v;
        break;
      }
  if (s.job_id.empty()) s.job_id = s.run_id;
  if (s.scheduler == "slurm")
    if (const char* v = env("SLURM_STEP_ID")) s.step_id = v;
  // torchrun's RANK first: under SLURM or mpirun it is the process's rank, the launcher's task id
  // is torchrun's own (one per node).
  s.rank = first_rank({"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"});
  if (s.rank < 0 && k8s) s.rank = ParseRank(env("JOB_COMPLETION_INDEX"));  // an indexed Job's pod, one rank each
  s.local_rank = first_rank({"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"});
  s.world_size = first_rank({"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"});
  if (const char* v = env("SLURMD_NODENAME")) s.node = v;
  if (k8s) {
    if (const char* v = env("POD_NAME")) s.pod = v;
    else if (const char* h = env("HOSTNAME")) s.pod = h;
    if (const char* v = env("POD_NAMESPACE")) s.pod_namespace = v;
    if (s.node.empty())
      if (const char* v = env("NODE_NAME")) s.node = v;
  }
  return s;
}

SchedulerIds ReadSchedulerIds(const std::vector<std::pair<std::string, std::string>>& env) {
  return ReadSchedulerIds([&](const char* name) -> const char* {
    for (const auto& [k, v] : env)
      if (k == name) return v.c_str();
    return nullptr;
  });
}

}  // namespace p2ptrace
