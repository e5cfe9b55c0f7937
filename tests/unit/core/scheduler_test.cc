// Job id, rank and node from each launcher's environment (core/scheduler.h), as real launchers set
// them: SLURM (srun), torchrun, torchrun inside SLURM, Open MPI 4 and 5, a bare PMIx launcher, a
// Kubernetes pod (downward API), and nothing at all.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/scheduler.h"

namespace {

using p2ptrace::ReadSchedulerIds;
using p2ptrace::SchedulerIds;
using Env = std::vector<std::pair<std::string, std::string>>;

TEST(Scheduler, Nothing) {
  SchedulerIds s = ReadSchedulerIds(Env{{"PATH", "/usr/bin"}, {"HOSTNAME", "laptop"}});
  EXPECT_EQ(s.scheduler, "");
  EXPECT_EQ(s.job_id, "");
  EXPECT_EQ(s.rank, -1);
  EXPECT_EQ(s.world_size, -1);
  EXPECT_EQ(s.node, "");
  EXPECT_EQ(s.pod, "");  // HOSTNAME names a pod only inside Kubernetes
}

TEST(Scheduler, Slurm) {
  SchedulerIds s = ReadSchedulerIds(Env{{"SLURM_JOB_ID", "918273"}, {"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "13"},
                                        {"SLURM_LOCALID", "5"}, {"SLURM_NTASKS", "16"}, {"SLURMD_NODENAME", "gpu-a17"}});
  EXPECT_EQ(s.scheduler, "slurm");
  EXPECT_EQ(s.job_id, "918273");
  EXPECT_EQ(s.step_id, "0");
  EXPECT_EQ(s.rank, 13);
  EXPECT_EQ(s.local_rank, 5);
  EXPECT_EQ(s.world_size, 16);
  EXPECT_EQ(s.node, "gpu-a17");
}

TEST(Scheduler, Torchrun) {
  SchedulerIds s = ReadSchedulerIds(Env{{"TORCHELASTIC_RUN_ID", "3f2a"}, {"RANK", "7"}, {"LOCAL_RANK", "3"},
                                        {"WORLD_SIZE", "8"}});
  EXPECT_EQ(s.scheduler, "torchrun");
  EXPECT_EQ(s.job_id, "3f2a");
  EXPECT_EQ(s.run_id, "3f2a");
  EXPECT_EQ(s.rank, 7);
  EXPECT_EQ(s.local_rank, 3);
  EXPECT_EQ(s.world_size, 8);
  // torchrun's default rendezvous id is not a job id
  EXPECT_EQ(ReadSchedulerIds(Env{{"TORCHELASTIC_RUN_ID", "none"}, {"RANK", "1"}}).job_id, "");
}

TEST(Scheduler, TorchrunInsideSlurm) {
  // srun starts one torchrun per node (SLURM_PROCID is the node's task); RANK is the process's rank.
  SchedulerIds s = ReadSchedulerIds(Env{{"SLURM_JOB_ID", "55"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"},
                                        {"TORCHELASTIC_RUN_ID", "55"}, {"RANK", "12"}, {"LOCAL_RANK", "4"},
                                        {"WORLD_SIZE", "16"}, {"SLURMD_NODENAME", "n2"}});
  EXPECT_EQ(s.scheduler, "slurm");
  EXPECT_EQ(s.job_id, "55");
  EXPECT_EQ(s.run_id, "55");
  EXPECT_EQ(s.rank, 12);
  EXPECT_EQ(s.local_rank, 4);
  EXPECT_EQ(s.world_size, 16);
  EXPECT_EQ(s.node, "n2");
}

TEST(Scheduler, OpenMpi) {
  SchedulerIds v4 = ReadSchedulerIds(Env{{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                         {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_MCA_orte_ess_jobid", "3056467969"}});
  EXPECT_EQ(v4.scheduler, "openmpi");
  EXPECT_EQ(v4.job_id, "3056467969");
  EXPECT_EQ(v4.rank, 3);
  EXPECT_EQ(v4.local_rank, 1);
  EXPECT_EQ(v4.world_size, 4);
  SchedulerIds v5 = ReadSchedulerIds(Env{{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                                         {"PMIX_NAMESPACE", "prterun-node0-4242@1"}, {"PMIX_RANK", "2"}});
  EXPECT_EQ(v5.scheduler, "openmpi");
  EXPECT_EQ(v5.job_id, "prterun-node0-4242@1");
  EXPECT_EQ(v5.rank, 2);
  SchedulerIds pmix = ReadSchedulerIds(Env{{"PMIX_NAMESPACE", "ns7"}, {"PMIX_RANK", "9"}});
  EXPECT_EQ(pmix.scheduler, "pmix");
  EXPECT_EQ(pmix.job_id, "ns7");
  EXPECT_EQ(pmix.rank, 9);
}

TEST(Scheduler, KubernetesPod) {
  // The downward API: POD_NAME, POD_NAMESPACE, NODE_NAME (spec.nodeName); a PyTorchJob sets RANK.
  SchedulerIds s = ReadSchedulerIds(Env{{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"POD_NAME", "train-worker-3"},
                                        {"POD_NAMESPACE", "ml"}, {"NODE_NAME", "gke-a3-pool-7"},
                                        {"HOSTNAME", "train-worker-3"}, {"RANK", "3"}, {"WORLD_SIZE", "4"},
                                        {"TORCHELASTIC_RUN_ID", "train"}});
  EXPECT_EQ(s.scheduler, "kubernetes");
  EXPECT_EQ(s.pod, "train-worker-3");
  EXPECT_EQ(s.pod_namespace, "ml");
  EXPECT_EQ(s.node, "gke-a3-pool-7");
  EXPECT_EQ(s.rank, 3);
  EXPECT_EQ(s.job_id, "train");
  // Without POD_NAME the pod's hostname is its name; an indexed Job's completion index is its rank.
  SchedulerIds h = ReadSchedulerIds(Env{{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"HOSTNAME", "bench-2-x7k2p"},
                                        {"JOB_COMPLETION_INDEX", "2"}});
  EXPECT_EQ(h.pod, "bench-2-x7k2p");
  EXPECT_EQ(h.pod_namespace, "");
  EXPECT_EQ(h.rank, 2);
  EXPECT_EQ(h.job_id, "");
}

TEST(Scheduler, MalformedNumbersAreUnknown) {
  SchedulerIds s = ReadSchedulerIds(Env{{"RANK", "-1"}, {"SLURM_PROCID", "x"}, {"OMPI_COMM_WORLD_RANK", "4"},
                                        {"WORLD_SIZE", "99999999999999"}, {"LOCAL_RANK", ""}});
  EXPECT_EQ(s.rank, 4);  // the first well-formed one
  EXPECT_EQ(s.world_size, -1);
  EXPECT_EQ(s.local_rank, -1);
}

TEST(Scheduler, FromAFunction) {
  SchedulerIds s = ReadSchedulerIds([](const char* n) -> const char* {
    return std::string(n) == "FLUX_JOB_ID" ? "fA1b2" : nullptr;
  });
  EXPECT_EQ(s.scheduler, "flux");
  EXPECT_EQ(s.job_id, "fA1b2");
}

TEST(Scheduler, EveryVariableReadIsRecorded) {
  // The shim's environment block keeps these names (shim/record/trace_writer.cc Allowed).
  const auto& names = p2ptrace::SchedulerVariables();
  for (const char* n : {"SLURM_JOB_ID", "SLURMD_NODENAME", "TORCHELASTIC_RUN_ID", "PMIX_NAMESPACE", "POD_NAME",
                        "POD_NAMESPACE", "NODE_NAME", "KUBERNETES_SERVICE_HOST", "OMPI_MCA_orte_ess_jobid"})
    EXPECT_NE(std::find_if(names.begin(), names.end(), [&](const char* x) { return std::string(x) == n; }),
              names.end())
        << n;
}

}  // namespace
