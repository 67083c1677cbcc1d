// CUDA launchers of the XPress ops: checks, device guard, current stream, dtype dispatch,
// launch.  No host synchronisation and no allocation (XPRESS_EXT_VALIDATE=1 adds a
// synchronising id check, for debugging outside graph capture).
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <map>
#include <utility>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "../checks.h"
#include "../dispatch.h"
#include "../kernels/latent_rows.cuh"  // includes latent_pass.cuh
#include "../kernels/topc_argmax.cuh"  // includes add_argmax.cuh
#include "../kernels/topc_select.cuh"
#include "../kernels/gather_rows.cuh"
#include "../kernels/hidden_concat.cuh"
#include "../kernels/gather_gemv.cuh"
#include "../kernels/readout_gemm.cuh"  // includes readout_argmax.cuh
#include "../ops.h"
#include "launch.h"

namespace xpress {
namespace {

namespace k = ::xpress::kernels;

template <typename T>
const T* cptr(const at::Tensor& t) {
  return reinterpret_cast<const T*>(t.const_data_ptr());
}

template <typename T>
T* mptr(at::Tensor& t) {
  return reinterpret_cast<T*>(t.mutable_data_ptr());
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// 16-byte vectors over rows of `t` are legal when the data and every row start are aligned.
bool rows_vectorizable(const at::Tensor& t, std::initializer_list<int64_t> row_strides) {
  if (!aligned16(t.const_data_ptr())) return false;
  for (int64_t s : row_strides) {
    if ((s * static_cast<int64_t>(t.element_size())) % 16 != 0) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// latent_pass

// Kernel attributes and occupancy answers do not change while the process runs, and the launch
// paths ask on every call: each is set or asked once per key, under a lock, and kept.  One
// cache per call site (the type of `make`, a lambda, names it); a `make` that throws caches
// nothing.
template <typename Key, typename Make>
auto once_per_key(const Key& key, Make&& make) {
  using Value = decltype(make());
  static std::mutex mu;
  static std::map<Key, Value> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const Value v = make();
  cache.emplace(key, v);
  return v;
}

template <typename Kernel>
const void* fn_key(Kernel kernel) {
  return reinterpret_cast<const void*>(kernel);
}

// Raises a kernel's dynamic shared-memory limit to `bytes` (default: the device's opt-in
// maximum), once per (kernel, device); a kernel takes one limit per process.
template <typename Kernel>
void allow_max_smem(Kernel kernel, int device, size_t bytes = 0) {
  once_per_key(std::make_pair(fn_key(kernel), device), [&] {
    const size_t limit = bytes > 0 ? bytes : at::cuda::getDeviceProperties(device)->sharedMemPerBlockOptin;
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(limit)));
    return true;
  });
}

// CTAs of a kernel (no dynamic shared memory) that fit one SM at once.
template <typename Kernel>
int resident_ctas_per_sm(Kernel kernel, int device, int threads) {
  return once_per_key(std::make_tuple(fn_key(kernel), device, threads), [&] {
    int resident = 0;
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, threads, 0));
    return resident;
  });
}

// Clusters of a kernel/configuration that can be co-resident on the device.  The first ask on a
// device also raises the kernel's dynamic shared-memory limit to the device's opt-in maximum
// and allows non-portable cluster sizes, once, so every later configuration fits under them.
template <typename Kernel>
int max_active_clusters(Kernel kernel, int device, int cluster, size_t smem) {
  return once_per_key(std::make_tuple(fn_key(kernel), device, cluster, smem), [&] {
    once_per_key(std::make_pair(fn_key(kernel), device), [&] {
      allow_max_smem(kernel, device);
      C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
      return true;
    });
    const LaunchConfig lc(dim3(cluster), dim3(k::kLatentThreads), smem, nullptr, cluster, /*pdl=*/false);
    int clusters = 0;
    C10_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &lc.cfg));
    return clusters;
  });
}

// How one latent_pass launch is laid out: the cluster variant (rows_mt == 0), or the row-tile
// variant with 16 * rows_mt rows per CTA.  Both give the same bits for every row.  The plan
// also names the kernel build that runs, so the launch does not decide it a second time.
template <typename T>
struct LatentPlan {
  k::LatentTiling tiling;  // cluster variant; its K-splits also set the row-tile variant's sums
  int max_clusters;        // co-resident clusters of this configuration
  int64_t groups;          // groups of blocks_per_group blocks
  // The groups launched (LatentArgs' schedule): full_groups whole groups, then the last
  // round's groups of tail_blocks blocks; tail_blocks == 0: the `groups` uniform groups.
  int64_t full_groups, sched_groups;
  int tail_blocks;
  int grid_clusters;       // clusters launched (persistent: each walks groups)
  int rows_mt;             // 0: cluster variant; 1 or 2: row-tile variant, 16 * rows_mt rows
  k::LatentRowsTiling rows;
  int64_t row_tiles;       // tiles of the row-tile variant
  int tile_ctas;           // CTAs a tile: 1, or 2 / 4 for the head's kernel in pairs (kPair) / quads (kQuad)
  bool fixed;              // the variant's kernel compiled for this head runs (the row-tile one: where
                           // encode_latent_rows_maps maps the weights, else the generic one)
  // The cluster variant's build, and the row-tile variant's (rows_mt > 0): [0] without the
  // embedding-latent table, [1] reading it.
  decltype(&k::latent_pass_kernel<T>) cluster_kernel[2];
  decltype(&k::latent_rows_kernel<T, 1>) rows_kernel[2];
};

// The variant forced by XPRESS_EXT_LATENT_VARIANT (benchmarks and tests): -1 none, 0 cluster,
// 1 / 2 the row-tile variant with 16 / 32 rows per CTA, 3 / 4 its 16-row tiles in pairs / quads
// of CTAs, where the head's kernel can run them (else one CTA a tile).
int forced_latent_variant() {
  return env_choice("XPRESS_EXT_LATENT_VARIANT", {"cluster", "rows16", "rows32", "pairs16", "quads16"}, -1);
}

// Whether the kernels compiled for the canonical head may run (XPRESS_EXT_LATENT_FIXED=0: the
// generic kernels everywhere; benchmarks and tests, read per call).
bool latent_fixed_enabled() { return env_choice("XPRESS_EXT_LATENT_FIXED", {"0", "1"}, 1) == 1; }

// Whether the cluster variant's last round may take smaller groups (XPRESS_EXT_LATENT_TAIL=0:
// whole groups; benchmarks and tests, read per call).
bool latent_tail_enabled() { return env_choice("XPRESS_EXT_LATENT_TAIL", {"0", "1"}, 1) == 1; }

// The kernels compiled for the canonical head (16-bit, B = 16, R = 256, H = 512, 8-CTA cluster
// tiling), where the index arithmetic is constants; the generic ones elsewhere.  Both give the
// same bits (tests/test_latent_pass.py::test_variants_bitwise_equal).
constexpr int kFixedB = 16, kFixedR = 256, kFixedH = 512, kFixedCluster = k::kLatentFixedCluster;

// The K-splits of phase 1 that latent_embed_table sums in: the kFixedCluster tiling's (a function
// of R and the cluster only).  latent_pass reads the table where its own tiling has the same.
int latent_table_ks1(int R, int elem_bytes) {
  return k::latent_shape(R, kFixedH, elem_bytes, kFixedCluster).ks1;
}

// The cluster variant's build for this shape (*fixed: the one compiled for the head).
template <typename T, bool kTable>
auto latent_cluster_kernel(int B, int R, int H, int cluster, bool fixed_enabled, bool* fixed) {
  *fixed = false;
  if constexpr (sizeof(T) == 2) {
    if (B == kFixedB && R == kFixedR && H == kFixedH && cluster == kFixedCluster && fixed_enabled) {
      *fixed = true;
      return k::latent_pass_kernel<T, kFixedB, kFixedR, kFixedH, kFixedCluster, kTable>;
    }
  }
  return k::latent_pass_kernel<T, 0, 0, 0, 0, kTable>;
}

// The row-tile variant's build: the head's when the plan's K-splits are the ones it has as
// constants (they are whenever the cluster tiling is the kFixedCluster one); `ranks` 2 / 4: its
// 16-row build that runs a tile in a cluster of two / four CTAs (the planner checks that the build
// has them, pairs_built).
template <typename T, bool kTable>
auto latent_rows_kernel_for(int mt, int B, int H, const k::LatentRowsTiling& rt, bool fixed_enabled, bool* fixed,
                            int ranks = 1) {
  constexpr k::LatentShape c = k::latent_shape(kFixedR, kFixedH, 2, kFixedCluster);
  *fixed = sizeof(T) == 2 && B == kFixedB && H == kFixedH && fixed_enabled && rt.kchunk1 == k::rows_kchunk1(c) &&
           rt.kchunk3 == k::rows_kchunk3(c);
  if constexpr (sizeof(T) == 2) {
    if (*fixed && ranks == 4 && mt == 1) return k::latent_rows_kernel<T, 1, kFixedB, kFixedH, kTable, false, true>;
    if (*fixed && ranks == 2 && mt == 1) return k::latent_rows_kernel<T, 1, kFixedB, kFixedH, kTable, true>;
    if (*fixed) {
      return mt == 1 ? k::latent_rows_kernel<T, 1, kFixedB, kFixedH, kTable>
                     : k::latent_rows_kernel<T, 2, kFixedB, kFixedH, kTable>;
    }
  }
  return mt == 1 ? k::latent_rows_kernel<T, 1, 0, 0, kTable> : k::latent_rows_kernel<T, 2, 0, 0, kTable>;
}

template <typename T>
LatentPlan<T> plan_latent_pass(int64_t N, int B, int R, int H, int device) {
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(device);
  TORCH_CHECK_NOT_IMPLEMENTED(prop->major >= 9,
                              "latent_pass: the CUDA kernel uses thread-block clusters and needs "
                              "compute capability 9.0 or newer; ",
                              prop->name, " is ", prop->major, ".", prop->minor);
  const int elem = static_cast<int>(sizeof(T));
  const size_t smem_limit = prop->sharedMemPerBlockOptin;

  // The cluster size is chosen from (dtype, R, H, B) only -- never from N -- so a row's
  // summation order, and therefore its bits, do not depend on the batch.
  const int min_blocks = std::max(1, 16 / B);
  const bool fixed_enabled = latent_fixed_enabled();
  LatentPlan<T> plan{};
  int cluster = 0;
  for (int cl : {8, 16}) {
    plan.tiling = k::make_latent_tiling(R, H, B, elem, cl, min_blocks);
    if (plan.tiling.smem_bytes <= smem_limit) {
      cluster = cl;
      break;
    }
  }
  TORCH_CHECK_VALUE(cluster != 0, "latent_pass: R=", R, ", H=", H, ", B=", B, " with ", elem,
                    "-byte elements needs ", plan.tiling.smem_bytes,
                    " bytes of shared memory per CTA even with the weights split over a 16-CTA "
                    "cluster; this GPU allows ",
                    smem_limit, ". The CPU implementation has no such limit.");
  plan.cluster_kernel[0] = latent_cluster_kernel<T, false>(B, R, H, cluster, fixed_enabled, &plan.fixed);
  plan.cluster_kernel[1] = latent_cluster_kernel<T, true>(B, R, H, cluster, fixed_enabled, &plan.fixed);
  // Co-resident clusters: of the two builds, the fewer (the schedule is the same for both).
  auto clusters_at = [&](size_t smem) {
    return std::min(max_active_clusters(plan.cluster_kernel[0], device, cluster, smem),
                    max_active_clusters(plan.cluster_kernel[1], device, cluster, smem));
  };
  plan.max_clusters = clusters_at(plan.tiling.smem_bytes);
  TORCH_CHECK(plan.max_clusters > 0, "latent_pass: no ", cluster, "-CTA cluster with ",
              plan.tiling.smem_bytes, " bytes of shared memory per CTA fits on ", prop->name);
  // Grow the group (rows per cluster iteration) while there are more groups than co-resident
  // clusters: bigger groups reuse each resident weight slice for more rows.
  auto groups_of = [N](const k::LatentTiling& t) {
    return (N + t.blocks_per_group - 1) / t.blocks_per_group;
  };
  for (int blocks = min_blocks * 2; blocks * B <= 64 && groups_of(plan.tiling) > plan.max_clusters;
       blocks *= 2) {
    const k::LatentTiling bigger = k::make_latent_tiling(R, H, B, elem, cluster, blocks);
    if (bigger.smem_bytes > smem_limit) break;
    const int bigger_clusters = clusters_at(bigger.smem_bytes);
    if (bigger_clusters <= 0) break;
    plan.tiling = bigger;
    plan.max_clusters = bigger_clusters;
  }
  plan.groups = groups_of(plan.tiling);
  // When the groups take more than one round of the co-resident clusters, the last round need
  // not be whole groups: its blocks are spread over the clusters in the smallest groups that
  // give each cluster at most one (a group's time grows with its rows).  At N = 32 on the
  // canonical head (15 co-resident clusters on an H200): 15 groups of 32 rows, then 2 of 16,
  // instead of a second round in which one cluster works on 32 rows while 14 idle.
  plan.sched_groups = plan.groups;
  if (plan.groups > plan.max_clusters && latent_tail_enabled()) {
    const int G = plan.tiling.blocks_per_group;
    const int64_t full = (plan.groups - 1) / plan.max_clusters * plan.max_clusters;
    const int64_t rem = N - full * G;  // the last round's blocks, in (0, max_clusters * G]
    const int tail = static_cast<int>(std::max<int64_t>(min_blocks, (rem + plan.max_clusters - 1) / plan.max_clusters));
    if (tail < G) {
      plan.full_groups = full;
      plan.tail_blocks = tail;
      plan.sched_groups = full + (rem + tail - 1) / tail;
    }
  }
  plan.grid_clusters = static_cast<int>(std::min<int64_t>(plan.sched_groups, plan.max_clusters));

  // The row-tile variant (16-bit types, R = kRowsR, H a multiple of R, B <= 32) once the
  // cluster variant would run three or more rounds of whole groups: each round of 32-row groups
  // costs it ~8 us, while the row-tile variant's time stays flat until its CTAs outnumber the
  // SMs.  Two whole rounds and a last round of smaller groups (N = 61-75 at the canonical head
  // on this H200's 15 co-resident clusters) are within 0.7 us of the row tiles.  H200, graph
  // replay, canonical head, bf16, with the table and prefetched weights (session 42, RESULTS.md),
  // µs at N = 61 / 64 / 70 / 76 / 80 / 90 / 96: cluster 21.6 / 22.0 / 22.9 / 24.5 / 24.9 / 25.8 /
  // 29.6, rows16 22.1 / 22.2 / 22.2 / 22.2 / 22.2 / 22.2 / 22.3 (probe_latent_variant.py).
  // Session 17 set four rounds (N >= 91) before either kernel took its current form.
  // The row-tile kernel compiled for the head (rows_head), whose phases 2 and 3 stream whole-K
  // boxes since session 44, runs a 16-row tile in ~15.3 us and takes over once the cluster
  // variant needs more than 5/4 rounds of 32-row groups (N >= 37 on an H200).  H200, graph
  // replay, canonical head, bf16, with the table and prefetched weights (session 44,
  // probe_latent_variant.py), us at N = 32 / 40 / 48 / 56 / 64 / 72: cluster 14.2 / 15.4 / 17.4 /
  // 18.1 / 22.0 / 23.2, rows16 15.2 / 15.3 / 15.4 / 15.4 / 15.5 / 15.5.  16 rows per CTA while
  // those tiles fit on the SMs, else 32.  Either variant gives the same bits.
  const bool rows_ok = elem == 2 && R == k::kRowsR && H % R == 0 && B <= 32;
  constexpr k::LatentShape head = k::latent_shape(kFixedR, kFixedH, 2, kFixedCluster);
  const bool rows_head = rows_ok && B == kFixedB && H == kFixedH && fixed_enabled &&
                         k::rows_kchunk1(plan.tiling) == k::rows_kchunk1(head) &&
                         k::rows_kchunk3(plan.tiling) == k::rows_kchunk3(head);
  // In pairs (kPair: the head's 16-row kernel, whose phases 2 and 3 are warpgroup MMAs, so an
  // sm_90a build on compute capability 9.0), each CTA of a tile streams 14 of the 28 stages
  // (16 until session 47 split the mixer too: ~12.8-13.3 us from N = 30 to 66; since session 48
  // their exchanges are st.async on mbarriers and each CTA writes half the tile: ~11.6-12.0 us
  // with the exchanges alone, latent_head 10.9 / 11.2 at N = 32 / 64 with both).
  // Pairs take over from the cluster variant once it needs a second round of groups (N >= 31 on
  // an H200) while every tile's pair is co-resident (N <= 66 on an H200's 132 SMs); past that,
  // one CTA a tile as above.  H200, as the head calls it (table, prefetched, packed weights),
  // session 46, probe_latent_variant.py, us at N = 24 / 30 / 31 / 36 / 48 / 64 / 66 / 67: cluster
  // 10.0 / 10.7 / 13.9 / 14.6 / 17.2 / 21.8 / 22.0 / 22.0, rows16 15.1 / 15.1 / 15.3 / 15.1 /
  // 15.3 / 15.4 / 15.3 / 15.3, pairs 13.2 / 13.4 / 13.3 / 13.3 / 13.5 / 13.7 / 13.7 / 25.0 (two
  // waves).  Same bits every way.  Pairs of 32-row tiles (one wave up to N = 132) were slower
  // than one CTA a 16-row tile at N = 67-132 (session 47, RESULTS.md: ~21.4-22.2 against ~17.1-17.7
  // us in the phase harness).
#ifdef XPRESS_EXT_WGMMA
  const bool pairs_built = rows_head && prop->major == 9 && prop->minor == 0;
#else
  const bool pairs_built = false;
#endif
  const int64_t whole_rounds = plan.tail_blocks > 0 ? plan.full_groups / plan.max_clusters
                                                    : (plan.sched_groups + plan.max_clusters - 1) / plan.max_clusters;
  const bool second_round = plan.groups > plan.max_clusters;
  int mt = 0;
  bool pair = false;
  if (rows_ok && (whole_rounds >= 3 || (rows_head && 4 * plan.groups > 5 * static_cast<int64_t>(plan.max_clusters)) ||
                  (pairs_built && second_round))) {
    const int64_t tiles16 = B <= 16 ? (N + 16 / B - 1) / (16 / B) : std::numeric_limits<int64_t>::max();
    mt = tiles16 <= prop->multiProcessorCount ? 1 : 2;
    pair = pairs_built && mt == 1;  // while the pairs are co-resident (below)
  }
  const int forced = forced_latent_variant();
  bool quad = false;
  if (forced >= 0) {
    const int want = forced >= 3 ? 1 : forced;  // pairs16, quads16: 16-row tiles
    mt = (want == 0 || !rows_ok || 16 * want < B) ? 0 : want;
    pair = forced == 3 && mt == 1 && pairs_built;
    quad = forced == 4 && mt == 1 && pairs_built;
  }
  // In quads (kQuad: the head's 16-row kernel, a tile in a cluster of four CTAs, 7 stages a CTA
  // and wgmma's N = 8) where every tile's quad is co-resident (N <= 30 on an H200: 30 clusters of
  // four), from where the cluster variant's groups grow past one block (N >= 16 on an H200: 16
  // groups of 16 rows, 15 co-resident clusters) or where pairs would run.  H200, as the head calls
  // it (table, prefetched, packed), session 50, probe_latent_variant.py, us at N = 4 / 8 / 12 / 16 /
  // 20 / 24 / 28 / 30 / 31: cluster 6.6 / 7.3 / 8.0 / 9.5 / 9.7 / 10.1 / 10.4 / 10.7 / 14.0,
  // quads16 8.4 / 8.5 / 8.6 / 8.8 / 9.1 / 9.2 / 9.2 / 9.4 / 17.1 (31 quads: two waves), pairs
  // 10.4-10.9.  Same bits every way.  32-row tiles in quads need a pair tiling (hand-off region)
  // that exceeds the shared memory.
  if (forced < 0 && pairs_built && (pair || plan.tiling.blocks_per_group > min_blocks)) {
    const k::LatentRowsTiling qt = k::make_latent_rows_tiling(R, H, B, 1, k::rows_stages<1>(), k::rows_kchunk1(plan.tiling),
                                                              k::rows_kchunk3(plan.tiling), true);
    bool qfixed = false;
    const auto q0 = latent_rows_kernel_for<T, false>(1, B, H, qt, fixed_enabled, &qfixed, 4);
    const auto q1 = latent_rows_kernel_for<T, true>(1, B, H, qt, fixed_enabled, &qfixed, 4);
    if (qt.smem_bytes <= smem_limit && qfixed &&
        (N + qt.blocks - 1) / qt.blocks <= std::min(max_active_clusters(q0, device, 4, qt.smem_bytes),
                                                    max_active_clusters(q1, device, 4, qt.smem_bytes))) {
      mt = 1;
      quad = true;
      pair = false;
    }
  }
  if (mt > 0) {
    const int stages = mt == 1 ? k::rows_stages<1>() : k::rows_stages<2>();
    auto tiling = [&](bool in_pairs) {  // a pair's has the hand-off region
      return k::make_latent_rows_tiling(R, H, B, mt, stages, k::rows_kchunk1(plan.tiling),
                                        k::rows_kchunk3(plan.tiling), in_pairs);
    };
    const k::LatentRowsTiling rt = tiling(false);
    if ((pair || quad) && tiling(true).smem_bytes > smem_limit) pair = quad = false;
    if (rt.smem_bytes <= smem_limit) {
      plan.rows_mt = mt;
      plan.row_tiles = (N + rt.blocks - 1) / rt.blocks;
      auto kernels = [&](int ranks) {
        plan.rows = tiling(ranks > 1);
        plan.rows_kernel[0] = latent_rows_kernel_for<T, false>(mt, B, H, plan.rows, fixed_enabled, &plan.fixed, ranks);
        plan.rows_kernel[1] = latent_rows_kernel_for<T, true>(mt, B, H, plan.rows, fixed_enabled, &plan.fixed, ranks);
        plan.tile_ctas = ranks;
      };
      // Whether every tile's cluster of `ranks` CTAs is co-resident with the kernels just chosen.
      auto co_resident = [&](int ranks) {
        return plan.row_tiles <= std::min(max_active_clusters(plan.rows_kernel[0], device, ranks, plan.rows.smem_bytes),
                                          max_active_clusters(plan.rows_kernel[1], device, ranks, plan.rows.smem_bytes));
      };
      kernels(quad ? 4 : pair ? 2 : 1);
      if (pair && forced != 3 && !co_resident(2)) kernels(1);  // every tile's pair co-resident, else one CTA a tile
    }
  }
  return plan;
}

template <typename T>
void launch_latent_pass(const LatentDims& d, const at::Tensor& blk, const at::Tensor& tok_am1,
                        const at::Tensor& xh, at::Tensor& lat_out, const at::Tensor& w1,
                        const at::Tensor& wlat_t, const at::Tensor& mix_kjc,
                        const at::Tensor& wg_t, const at::Tensor& wu_t, const at::Tensor& wd_t,
                        bool do_mlp, bool prefetch_weights, const std::optional<at::Tensor>& emb_lat,
                        const std::optional<at::Tensor>& wpack) {
  const int device = blk.get_device();
  const int R = static_cast<int>(d.R), H = static_cast<int>(d.H), B = static_cast<int>(d.B);
  const LatentPlan<T> plan = plan_latent_pass<T>(d.N, B, R, H, device);

  k::LatentArgs<T> a{};
  a.blk = blk.const_data_ptr<int64_t>();
  a.blk_sn = blk.stride(0);
  a.blk_sb = blk.stride(1);
  a.tok_am1 = tok_am1.const_data_ptr<int64_t>();
  a.am1_s = tok_am1.stride(0);
  a.xh = cptr<T>(xh);
  a.xh_sn = xh.stride(0);
  a.xh_sb = xh.stride(1);
  a.lat_out = mptr<T>(lat_out);
  a.out_sn = lat_out.stride(0);
  a.out_sb = lat_out.stride(1);
  a.w1 = cptr<T>(w1);
  a.w1_s = w1.stride(0);
  a.vocab = d.V;
  a.wlat = cptr<T>(wlat_t);
  a.wlat_s = wlat_t.stride(0);
  a.mix = cptr<T>(mix_kjc);
  a.mix_sk = mix_kjc.stride(0);
  a.mix_sj = mix_kjc.stride(1);
  a.wg = cptr<T>(wg_t);
  a.wg_s = wg_t.stride(0);
  a.wu = cptr<T>(wu_t);
  a.wu_s = wu_t.stride(0);
  a.wd = cptr<T>(wd_t);
  a.wd_s = wd_t.stride(0);
  a.N = static_cast<int>(d.N);
  a.B = B;
  a.R = R;
  a.H = H;
  a.num_groups = static_cast<int>(plan.sched_groups);
  a.full_groups = static_cast<int>(plan.tail_blocks > 0 ? plan.full_groups : plan.sched_groups);
  a.tail_blocks = plan.tail_blocks;
  a.tail_rows = k::round_up(plan.tail_blocks * B, 16);
  a.do_mlp = do_mlp;
  // 16-byte copies need aligned rows, and a channel count that splits into whole vectors so
  // that no vector straddles the end of the valid region.
  constexpr int kV = k::kVecElems<T>;
  const bool whole_r = R % kV == 0;
  a.vec_w1 = whole_r && rows_vectorizable(w1, {w1.stride(0)});
  a.vec_weights = whole_r && H % kV == 0 && rows_vectorizable(wlat_t, {wlat_t.stride(0)}) &&
                  rows_vectorizable(wg_t, {wg_t.stride(0)}) &&
                  rows_vectorizable(wu_t, {wu_t.stride(0)}) &&
                  rows_vectorizable(wd_t, {wd_t.stride(0)});
  a.vec_mix = whole_r && rows_vectorizable(mix_kjc, {mix_kjc.stride(0), mix_kjc.stride(1)});
  a.vec_xh = whole_r && rows_vectorizable(xh, {xh.stride(0), xh.stride(1)});
  a.prefetch_weights = prefetch_weights;
  a.t = plan.tiling;
  // The embedding-latent table replaces phase 1 where its K-splits (latent_table_ks1) are this
  // tiling's (the row-tile kernel's too); the cluster kernel also needs a group's pieces in whole
  // 16-byte vectors that fit the threads' registers (latent_pass.cuh, emb_fast).  Else the
  // kernel computes phase 1 from w1: the same bits.
  const bool table_sums = emb_lat.has_value() && plan.tiling.ks1 == latent_table_ks1(R, static_cast<int>(sizeof(T)));
  if (table_sums && (plan.rows_mt > 0 || (R % 4 == 0 && rows_vectorizable(*emb_lat, {emb_lat->stride(0)}) &&
                                          plan.tiling.rows * (plan.tiling.rc / 4) <= k::kLatentEmbVecs * k::kLatentThreads))) {
    a.emb_lat = emb_lat->const_data_ptr<float>();
    a.el_s = emb_lat->stride(0);
  }
  const int build = a.emb_lat != nullptr ? 1 : 0;
  // The packed stages (checked: contiguous, 16-byte aligned, the layout's shape); only the row-tile
  // kernel compiled for the head on sm_90a reads them, the other kernels read the weights.
  if (wpack.has_value()) a.wpack = cptr<T>(*wpack);

  if (plan.rows_mt > 0) {
    k::LatentRowsArgs<T> ra{};
    ra.a = a;
    ra.t = plan.rows;
    auto kernel = plan.rows_kernel[build];
    // The head's kernel streams its weights by TMA; weights it cannot map (not in whole 16-byte
    // rows, a mixer not evenly strided) take the generic kernel, which gives the same bits.
    int ctas = plan.tile_ctas;
    TORCH_CHECK(ctas == 1 || plan.rows.off_hand > 0, "latent_pass: internal: a tiling for a pair or quad of CTAs without its hand-off region");
    if (plan.fixed && !k::encode_latent_rows_maps(ra)) {
      bool generic_fixed = false;
      kernel = build ? latent_rows_kernel_for<T, true>(plan.rows_mt, B, H, plan.rows, false, &generic_fixed)
                     : latent_rows_kernel_for<T, false>(plan.rows_mt, B, H, plan.rows, false, &generic_fixed);
      ctas = 1;
    }
    allow_max_smem(kernel, device);
    launch_kernel(kernel, dim3(static_cast<unsigned>(plan.row_tiles * ctas)), dim3(k::kLatentThreads),
                  plan.rows.smem_bytes, at::cuda::getCurrentCUDAStream(device).stream(), ctas, ra);
    return;
  }
  launch_kernel(plan.cluster_kernel[build], dim3(plan.grid_clusters * plan.tiling.cluster),
                dim3(k::kLatentThreads), plan.tiling.smem_bytes,
                at::cuda::getCurrentCUDAStream(device).stream(), plan.tiling.cluster, a);
}

// ---------------------------------------------------------------------------------------------
// add_argmax_to_blk

// XPRESS_EXT_ARGMAX_SCAN (benchmarks and tests, read per call): "packed" (default) scores 16-bit
// rows two per register and takes top-C argmax's packed kernel; "chain" keeps the per-element
// RunningArgmax chain and the general top-C kernel.
bool packed_argmax_scan() { return env_choice("XPRESS_EXT_ARGMAX_SCAN", {"packed", "chain"}, 0) == 0; }

// kernel<kVec, kPacked> for the row layout and dtype: the packed scan needs 16-bit vectors.
template <typename T, typename Pick>
auto pick_argmax_kernel(bool vec, bool packed, Pick pick) {
  if constexpr (sizeof(T) == 2) {
    if (vec && packed) return pick(std::true_type{}, std::true_type{});
  }
  return vec ? pick(std::true_type{}, std::false_type{}) : pick(std::false_type{}, std::false_type{});
}

template <typename T>
void launch_add_argmax(const AddArgmaxDims& d, const at::Tensor& base, const std::optional<at::Tensor>& bias,
                       at::Tensor& blk) {
  const int device = blk.get_device();
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(device);
  const int64_t rows = d.N * d.Bm1;
  constexpr int kV = k::kVecElems<T>;

  // Split rows over a cluster (sm_90+ only), doubling the split while the grid holds fewer
  // row-chunks than per_sm x SMs (so it ends with per_sm to 2 per_sm chunks per SM); never into
  // chunks of less than one vector per thread.  per_sm = 1.  Measured on the H200 with the packed
  // scan (bf16, V = 151,936, bench.py --ops add_argmax), us at N = 1 / 4 / 16 / 32 / 64:
  // - session 8 (before PDL, one run each; 4 twice), per_sm 2 / 3 / 4 / 8: 6.4 / 15.9 / 38.5 /
  //   69.8 / 133.8, 6.5 / 15.8 / 38.3 / 69.3 / 133.7, 6.4-6.5 / 15.7-15.9 / 42.9-43.4 /
  //   71.7-72.1 / 133.6-134.8, 6.4 / 15.8 / 51.5 / 77.2 / 137.9 (N >= 128 the same);
  // - session 9 (with PDL, same run): per_sm 1: 5.8 / 12.2 / 36.9 / 67.7 / 131.1; per_sm 2 (two
  //   alternations): 5.9-6.0 / 15.3-15.4 / 37.0-37.3 / 67.8 / 131.1-131.2.
  // At N = 4, per_sm 1 gives 240 CTAs of a quarter row each, against 480 eighths with 2.
  // Unlike topc_select's (below), fewer CTAs a row did not help the full draft step, whose start
  // runs the bias-less argmax beside the hidden cache's GEMMs: session 30, bench.py, at most 4 / 2
  // (XPRESS_EXT_ARGMAX_MAX_SPLITS) 211.7, 210.6 / 213.0, 210.6 us at N = 1 against 209.8, 209.8.
  int splits = 1;
  if (prop->major >= 9) {
    // XPRESS_EXT_ARGMAX_CTAS_PER_SM and XPRESS_EXT_ARGMAX_MAX_SPLITS (benchmarking only)
    static const int64_t per_sm = env_int("XPRESS_EXT_ARGMAX_CTAS_PER_SM", 1, 64, 1);
    static const int max_splits = env_pow2("XPRESS_EXT_ARGMAX_MAX_SPLITS", k::kArgmaxMaxSplits);
    const int64_t target = per_sm * prop->multiProcessorCount;
    while (splits < max_splits && rows * splits < target &&
           d.V / (splits * 2) >= static_cast<int64_t>(k::kArgmaxOneWaveThreads) * kV) {
      splits *= 2;
    }
  }
  k::AddArgmaxArgs<T> a{};
  a.base = cptr<T>(base);
  a.base_sn = d.base.sn;
  a.base_sb = d.base.sb;
  a.bias = bias.has_value() ? cptr<T>(*bias) : nullptr;  // nullptr: the argmax of base alone
  a.bias_sn = d.bias.sn;
  a.bias_sb = d.bias.sb;
  a.blk = mptr<int64_t>(blk);
  a.blk_sn = blk.stride(0);
  a.blk_sb = blk.stride(1);
  a.rows = rows;
  a.bm1 = d.Bm1;
  a.vocab = d.V;
  a.chunk = (d.V + splits - 1) / splits;
  a.chunk = (a.chunk + kV - 1) / kV * kV;
  const bool vec = rows_vectorizable(base, {d.base.sn, d.base.sb}) &&
                   (!bias.has_value() || rows_vectorizable(*bias, {d.bias.sn, d.bias.sb}));

  const bool packed = packed_argmax_scan();  // read (and checked) for every dtype
  auto pick = [&](auto threads_c) {
    return pick_argmax_kernel<T>(vec, packed, [](auto kvec, auto kpacked) {
      return k::add_argmax_kernel<T, decltype(kvec)::value, decltype(kpacked)::value, k::kArgmaxUnroll,
                                  decltype(threads_c)::value>;
    });
  };
  // 256-thread CTAs while their grid fits the SMs at once, at most kArgmaxSmallCtasPerSm an SM
  // (add_argmax.cuh), else 512.
  auto kernel = pick(std::integral_constant<int, k::kArgmaxThreads>{});
  int threads = k::kArgmaxThreads;
  const int resident = std::min(resident_ctas_per_sm(kernel, device, threads), k::kArgmaxSmallCtasPerSm);
  if (rows * splits > static_cast<int64_t>(resident) * prop->multiProcessorCount) {
    kernel = pick(std::integral_constant<int, k::kArgmaxOneWaveThreads>{});
    threads = k::kArgmaxOneWaveThreads;
  }
  // One wave (every CTA on its own SM): the packed scan takes 512 threads and 8 vectors per step.
  // XPRESS_EXT_ARGMAX_ONE_WAVE=k (benchmarking only): 8 vectors while the grid has at most k
  // CTAs per SM (default 1; 0 never).
  static const int64_t one_wave_ctas = env_int("XPRESS_EXT_ARGMAX_ONE_WAVE", 0, 64, 1);
  if constexpr (sizeof(T) == 2) {
    if (vec && packed && rows * splits <= one_wave_ctas * prop->multiProcessorCount) {
      kernel = k::add_argmax_kernel<T, true, true, k::kArgmaxOneWaveUnroll, k::kArgmaxOneWaveThreads>;
      threads = k::kArgmaxOneWaveThreads;
    }
  }
  launch_kernel(kernel, dim3(splits, static_cast<unsigned>(std::min<int64_t>(rows, 65535))), dim3(threads), 0,
                at::cuda::getCurrentCUDAStream(device).stream(), splits, a);
}

// ---------------------------------------------------------------------------------------------
// readout_argmax_to_blk

// Three ways, by shape (XPRESS_EXT_READOUT=split forces the last, for A/B runs and tests; read
// per call):
//   - up to 16 rows (N = 1 at B = 16): the 16-row kernel of readout_argmax.cuh, a GEMV-shaped
//     stream of W2 with the rows' lat as MMA fragments;
//   - 17+ rows on an sm_90a build running on compute capability 9.0 (XPRESS_EXT_WGMMA, see
//     setup.py), B-1 <= 128: the warpgroup-MMA GEMM of readout_gemm.cuh, TMA-fed;
//   - anything else: the readout as one GEMM into `bias` (the caller's scratch, else a new
//     tensor) and then add_argmax.
// Both fused paths take 16-bit rows of R = 128 or 256, 16-byte-aligned rows of base and w2 and V
// a multiple of 8.  Measured on the H200 (benchmarks/RESULTS.md): the 16-row kernel takes
// 27.0-27.6 µs at N = 1 (session 20; the split path ~30.6; 26.9 with session 34's staged
// tiles); the GEMM kernel 76.4 µs at N = 32 in session 26's table (81.0 at 480 rows in
// benchmarks/readout_gemm_harness.cu, 90.5 for session 25's build), against ~150 for the split
// path, and 27.5 at 15 rows in the harness, where the 16-row kernel's 26.0 stays.

template <typename T>
void launch_readout_argmax(const ReadoutDims& d, const at::Tensor& base, const at::Tensor& lat, const at::Tensor& w2,
                           at::Tensor& blk, const std::optional<at::Tensor>& bias, bool prefetch_weights, bool reverse) {
  const int device = blk.get_device();
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(device);
  const int64_t rows = d.a.N * d.a.Bm1;
  const bool fusable = sizeof(T) == 2 && (d.R == 256 || d.R == 128) && d.a.V % k::kVecElems<T> == 0 &&
                       rows_vectorizable(base, {d.a.base.sn, d.a.base.sb}) && rows_vectorizable(w2, {w2.stride(0)}) &&
                       env_choice("XPRESS_EXT_READOUT", {"fused", "split"}, 0) == 0;
  const bool small = fusable && rows <= k::kReadoutMaxRows;
#ifdef XPRESS_EXT_WGMMA
  const bool gemm = fusable && !small && d.a.Bm1 <= k::kGemmRows && prop->major == 9 && prop->minor == 0;
#else
  const bool gemm = false;
#endif
  if constexpr (sizeof(T) == 2) {  // the tensor-core kernels exist for 16-bit types only
    if (small || gemm) {
      k::ReadoutArgs<T> a{};
      a.base = cptr<T>(base);
      a.base_sn = d.a.base.sn;
      a.base_sb = d.a.base.sb;
      a.lat = cptr<T>(lat);
      a.lat_sn = d.a.bias.sn;
      a.lat_sb = d.a.bias.sb;
      a.w2 = cptr<T>(w2);
      a.w2_s = w2.stride(0);
      a.blk = mptr<int64_t>(blk);
      a.blk_sn = blk.stride(0);
      a.blk_sb = blk.stride(1);
      a.rows = static_cast<int>(rows);
      a.bm1 = static_cast<int>(d.a.Bm1);
      a.R = static_cast<int>(d.R);
      a.V = d.a.V;
      a.prefetch = prefetch_weights;
      a.reverse = reverse;
      const cudaStream_t stream = at::cuda::getCurrentCUDAStream(device).stream();
      const dim3 red_grid(static_cast<unsigned>((rows + k::kReadoutWarps - 1) / k::kReadoutWarps));
      if (small) {
        const int sms = prop->multiProcessorCount - (prefetch_weights && prop->multiProcessorCount > 2 * k::kReadoutBehindSMs ? k::kReadoutBehindSMs : 0);
        const int parts = static_cast<int>(std::min<int64_t>((d.a.V / 8 + k::kReadoutWarps - 1) / k::kReadoutWarps, sms));
        at::Tensor partial = at::empty({rows, parts}, blk.options());
        a.partial = reinterpret_cast<uint64_t*>(partial.mutable_data_ptr<int64_t>());
        const auto kernel = a.R == 256 ? k::readout_argmax_partial_kernel<T, 16> : k::readout_argmax_partial_kernel<T, 8>;
        allow_max_smem(kernel, device);  // the staged W2 tiles: ~111 KB at R = 256
        launch_kernel(kernel, dim3(static_cast<unsigned>(parts)), dim3(k::kReadoutThreads), k::readout_smem_bytes(a.R, sizeof(T)), stream, 1, a);
        launch_kernel(k::readout_argmax_reduce_kernel<T>, red_grid, dim3(k::kReadoutThreads), 0, stream, 1, a, parts);
        return;
      }
      const bool tail = d.a.V % k::kGemmTileV != 0;
      const auto kernel = a.R == 256 ? (tail ? k::readout_argmax_gemm_kernel<T, 16, true> : k::readout_argmax_gemm_kernel<T, 16, false>)
                                     : (tail ? k::readout_argmax_gemm_kernel<T, 8, true> : k::readout_argmax_gemm_kernel<T, 8, false>);
      const k::ReadoutGemmGrid grid = k::readout_gemm_grid(d.a.N, d.a.Bm1, d.a.V, prop->multiProcessorCount);
      k::ReadoutGemmArgs<T> g{};
      g.a = a;
      g.tiles = (d.a.V + k::kGemmTileV - 1) / k::kGemmTileV;
      g.nb = grid.nb;
      if (k::encode_readout_gemm_maps(g, d.a.N)) {
        at::Tensor partial = at::empty({rows, grid.splits}, blk.options());
        g.a.partial = reinterpret_cast<uint64_t*>(partial.mutable_data_ptr<int64_t>());
        allow_max_smem(kernel, device);
        launch_kernel(kernel, dim3(static_cast<unsigned>(grid.mblocks), static_cast<unsigned>(grid.splits)), dim3(k::kGemmThreads),
                      k::gemm_smem_bytes(a.R), stream, 1, g);
        launch_kernel(k::readout_argmax_reduce_kernel<T>, red_grid, dim3(k::kReadoutThreads), 0, stream, 1, g.a, grid.splits);
        return;
      }
      // The driver refused a tensor map (strides TMA cannot express): the split path below.
    }
  }
  at::Tensor out = bias.has_value() ? *bias : at::empty({rows, d.a.V}, base.options());
  at::mm_out(out, lat.reshape({rows, d.R}), w2.t());
  AddArgmaxDims ad = d.a;
  ad.bias = {out.stride(0) * d.a.Bm1, out.stride(0)};
  launch_add_argmax<T>(ad, base, out, blk);
}

// ---------------------------------------------------------------------------------------------
// topc_argmax_to_blk

template <typename T>
void launch_topc_argmax(const TopcDims& d, const at::Tensor& base_c, const at::Tensor& bias_c,
                        const at::Tensor& cand, at::Tensor& blk) {
  const int64_t rows = d.N * d.Bm1;
  k::TopcArgmaxArgs<T> a{};
  a.base = cptr<T>(base_c);
  a.base_sn = base_c.stride(0);
  a.base_sb = base_c.stride(1);
  a.bias = cptr<T>(bias_c);
  a.bias_sn = bias_c.stride(0);
  a.bias_sb = bias_c.stride(1);
  a.cand = cand.const_data_ptr<int64_t>();
  a.cand_sn = cand.stride(0);
  a.cand_sb = cand.stride(1);
  a.blk = mptr<int64_t>(blk);
  a.blk_sn = blk.stride(0);
  a.blk_sb = blk.stride(1);
  a.rows = rows;
  a.bm1 = d.Bm1;
  a.C = d.C;
  a.warps_per_row = d.C > 1024 ? k::kTopcWarps : 1;
  a.trigger_first = rows <= k::kTopcTriggerFirstRows;
  const int64_t rows_per_cta = k::kTopcWarps / a.warps_per_row;
  const int64_t grid = (rows + rows_per_cta - 1) / rows_per_cta;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(blk.get_device()).stream();
  const bool vec = rows_vectorizable(base_c, {a.base_sn, a.base_sb}) &&
                   rows_vectorizable(bias_c, {a.bias_sn, a.bias_sb});
  const bool packed = packed_argmax_scan();  // read (and checked) for every dtype
  if constexpr (sizeof(T) == 2) {
    constexpr int kV = k::kVecElems<T>;
    const int64_t vecs = (d.C + 32 * kV - 1) / (32 * kV);  // 16-byte vectors per lane
    if (vec && d.C % kV == 0 && vecs <= k::kTopcPackedMaxVecs && d.N <= 65535 && packed) {
      // XPRESS_EXT_TOPC_WARPS: rows per CTA (benchmarking only)
      static const int warps = env_pow2("XPRESS_EXT_TOPC_WARPS", k::kTopcPackedWarps);
      const dim3 pgrid(static_cast<unsigned>((d.Bm1 + warps - 1) / warps), static_cast<unsigned>(d.N));
      const unsigned threads = warps * 32;
      if (vecs == 1) {
        launch_kernel(k::topc_argmax_packed_kernel<T, 1>, pgrid, dim3(threads), 0, stream, 1, a);
      } else if (vecs == 2) {
        launch_kernel(k::topc_argmax_packed_kernel<T, 2>, pgrid, dim3(threads), 0, stream, 1, a);
      } else {
        launch_kernel(k::topc_argmax_packed_kernel<T, 4>, pgrid, dim3(threads), 0, stream, 1, a);
      }
      return;
    }
  }
  auto kernel = pick_argmax_kernel<T>(vec, packed, [](auto kvec, auto kpacked) {
    return k::topc_argmax_kernel<T, decltype(kvec)::value, decltype(kpacked)::value>;
  });
  launch_kernel(kernel, dim3(static_cast<unsigned>(grid)), dim3(k::kTopcThreads), 0, stream, 1, a);
}

// ---------------------------------------------------------------------------------------------
// topc_select

// XPRESS_EXT_TOPC_SPLITS: CTAs a row forced on both kernels (benchmarking only; 0 when unset),
// read once per process.
int forced_topc_splits() {
  static const int forced = env_pow2("XPRESS_EXT_TOPC_SPLITS", 0);
  return forced;
}

// CTAs per row (the cluster size): 1, 2, 4 or 8 -- at least enough that a CTA's slice fits its
// chunk table, and more while the whole grid still fits the SMs once (below).
// XPRESS_EXT_TOPC_SPLITS forces a size (forced_topc_splits).
int topc_select_splits(int64_t rows, int64_t V, const cudaDeviceProp* prop) {
  const int64_t needed = (V + k::kSelMaxSlice - 1) / k::kSelMaxSlice;
  TORCH_CHECK_VALUE(needed <= (prop->major >= 9 ? k::kSelMaxSplits : 1), "topc_select: logits.shape[-1] (V) = ", V,
                    " is above what this GPU's kernel takes (", (prop->major >= 9 ? k::kSelMaxSplits : 1) * k::kSelMaxSlice, ")");
  const int forced = forced_topc_splits();
  if (prop->major < 9) return 1;
  if (forced != 0 && forced >= needed) return forced;
  int splits = 1;
  // Measured on the H200 (bf16, V = 151,936, C = 512, benchmarks/topc_select_phases.cu): a row
  // split over a cluster pays off only while the clusters leave SMs idle -- 15 rows: 28.7 / 25.2
  // / 22.0 / 23.0 us with 1 / 2 / 4 / 8 CTAs per row; 60 rows: 28.6 / 25.8 / 27.9; 240 rows:
  // 44.8 / 61.9 with 1 / 2 (single launches) -- so: the most CTAs per row with rows * splits <=
  // SMs, at most 4.  Alone, 8 is slightly faster at 15 rows (graph replay: 14.85 against 15.12
  // us in session 21; 13.6-13.7 against 13.8-14.0 in session 30's bench.py rows), but in the
  // head's top-C step it runs on a side stream beside the hidden cache's GEMMs, and there 4 CTAs
  // a row (60 CTAs, clusters of 4) leave them room: bench.py's top-C step at N = 1 80.3 / 81.5
  // us against 85.3 / 87.6 with 8 (two alternations, one H200; same drafts; RESULTS.md).
  constexpr int kPreferredMaxSplits = 4;
  while (splits < needed || (splits < kPreferredMaxSplits && rows * splits * 2 <= prop->multiProcessorCount &&
                             V / (splits * 2) >= 8LL * k::SelWide::kCtaThreads)) {
    splits *= 2;
  }
  return splits;
}

// How one topc_select launch is laid out: the kernel, CTAs per row and the CTA shape
// (topc_select.cuh).
struct TopcSelectPlan {
  int splits;
  int threads;  // 512 (wide, and the register kernel) or 256 (narrow)
  int64_t slice;  // elements a CTA owns
  size_t smem;
  bool regs;  // the register kernel (topc_select_regs_kernel), vecs 16-byte vectors a thread
  int vecs;
};

// The register kernel's instances: CTAs per row and the vectors a thread holds, so that each
// holds up to kSelRegsMaxV elements a row (the canonical 151,936 with room).
constexpr int64_t kSelRegsMaxV = 163'840;
constexpr int sel_regs_vecs(int splits) { return splits == 8 ? 5 : 10; }
// CTAs a row the register kernel takes unless XPRESS_EXT_TOPC_SPLITS says 4 or 8.  H200, bf16,
// bench.py's N = 1 (15 rows, session 64's kernel): alone 8.2-8.3 us with 4 (`probe_topc_splits.py`)
// against 7.3 with 8 (7.5 in `bench.py`) and 13.1 for the cluster kernel; but in the top-C draft
// step, where it runs beside the hidden cache's GEMMs, 63.8-64.2 us a step with 4 against
// 65.1-65.5 with 8 (`probe_latent_step.py --steps-only --topc --n=1`, alternating, same drafts;
// RESULTS.md, sessions 63-64).  So 8 while rows * 8 <= SMs - sm_margin (the SMs the caller leaves to
// work beside the call; the head passes half the SMs when its step's start runs beside the GEMMs),
// else 4.
int sel_regs_splits(int64_t rows, int64_t sm_margin, const cudaDeviceProp* prop) {
  const int forced = forced_topc_splits();
  if (forced != 0) return forced;
  return rows * 8 <= prop->multiProcessorCount - sm_margin ? 8 : 4;
}

// Whether a call takes the register kernel (topc_select.cuh): a 16-bit dtype, V a multiple of 8
// up to kSelRegsMaxV, rows 16-byte aligned, c within the row's chunks, and the rows one per
// cluster on the SMs at once (rows * CTAs a row <= SMs: one wave).  H200, bf16, V = 151,936,
// C = 512, 15 rows, graph replay (benchmarks/topc_regs_probe.cu): 6.9 us with 8 CTAs a row, 8.0
// with 4, against 12.6 for the cluster kernel (session 64); at 60 rows (clusters in waves, session
// 62's build) 20.3 / 18.2 against 15.8, so not beyond one wave.  XPRESS_EXT_TOPC_KERNEL=stream never takes it,
// =regs takes it wherever the first four conditions hold (at any row count up to 65,535: a row
// is a grid row, without the cluster kernel's loop over rows); XPRESS_EXT_TOPC_CTA (a shape of
// the other kernels) leaves it out too (read per call).
bool topc_select_takes_regs(int64_t rows, int64_t V, int64_t c, bool half_aligned, int splits,
                            const cudaDeviceProp* prop) {
  const int forced = env_choice("XPRESS_EXT_TOPC_KERNEL", {"stream", "regs"}, -1);
  if (forced == 0 || env_choice("XPRESS_EXT_TOPC_CTA", {"wide", "narrow"}, -1) >= 0) return false;
  if (prop->major < 9 || !half_aligned || V % 8 != 0 || V > kSelRegsMaxV || (splits != 4 && splits != 8)) return false;
  if (c > k::sel_regs_chunks(V, splits, sel_regs_vecs(splits))) return false;
  return (forced == 1 && rows <= 65'535) || rows * splits <= prop->multiProcessorCount;
}

// The narrow shape once the wide grid (two CTAs per SM) would take more than one wave, if c fits
// its fast path (c <= the row's 128-element chunks).  H200, bf16, V = 151,936, C = 512, graph
// replay: wide / narrow 36.4 / 43.0 µs at 240 rows, 58.9 / 48.3 at 300, 71.7 / 60.1 at 480,
// 486.4 / 430.9 at 3840 (benchmarks/topc_select_phases.cu).  XPRESS_EXT_TOPC_CTA=wide|narrow
// forces a shape (benchmarks and tests; read per call).
TopcSelectPlan plan_topc_select(int64_t rows, int64_t V, int64_t c, bool half_aligned, int64_t sm_margin,
                                const cudaDeviceProp* prop) {
  TopcSelectPlan plan{};
  const int regs_splits = sel_regs_splits(rows, sm_margin, prop);
  if (topc_select_takes_regs(rows, V, c, half_aligned, regs_splits, prop)) {
    plan.regs = true;
    plan.splits = regs_splits;
    plan.vecs = sel_regs_vecs(regs_splits);
    plan.threads = k::kSelRegThreads;
    plan.slice = (V / 8 + regs_splits - 1) / regs_splits * 8;
    plan.smem = k::sel_regs_smem(plan.vecs);
    return plan;
  }
  plan.splits = topc_select_splits(rows, V, prop);
  const int64_t slice = (V + plan.splits - 1) / plan.splits;
  const int64_t narrow_chunks = (V + k::SelNarrow::kChunk - 1) / k::SelNarrow::kChunk;
  bool narrow = rows * plan.splits > static_cast<int64_t>(k::SelWide::kMinBlocks) * prop->multiProcessorCount &&
                c <= narrow_chunks;
  const int forced = env_choice("XPRESS_EXT_TOPC_CTA", {"wide", "narrow"}, -1);
  if (forced >= 0) narrow = forced == 1;
  plan.threads = narrow ? 256 : 512;
  const int chunk = narrow ? k::SelNarrow::kChunk : k::SelWide::kChunk;
  plan.slice = (slice + chunk - 1) / chunk * chunk;
  plan.smem = narrow ? k::SelNarrow::smem(plan.slice) : k::SelWide::smem(plan.slice);
  return plan;
}

template <typename T>
void launch_topc_select(const TopcSelectDims& d, const at::Tensor& logits, at::Tensor& values,
                        at::Tensor& ids, const std::optional<at::Tensor>& blk, int64_t sm_margin) {
  const int device = logits.get_device();
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(device);
  const int64_t rows = d.N * d.Bm1;
  const bool vec = rows_vectorizable(logits, {d.logits.sn, d.logits.sb});
  const TopcSelectPlan plan = plan_topc_select(rows, d.V, d.c, sizeof(T) == 2 && vec, sm_margin, prop);
  k::TopcSelectArgs<T> a{};
  a.logits = cptr<T>(logits);
  a.l_sn = d.logits.sn;
  a.l_sb = d.logits.sb;
  a.values = mptr<T>(values);
  a.v_sn = d.values.sn;
  a.v_sb = d.values.sb;
  a.ids = mptr<int64_t>(ids);
  a.i_sn = d.ids.sn;
  a.i_sb = d.ids.sb;
  if (blk.has_value()) {
    a.blk = blk->mutable_data_ptr<int64_t>();
    a.blk_sn = blk->stride(0);
    a.blk_sb = blk->stride(1);
  }
  a.rows = rows;
  a.bm1 = d.Bm1;
  a.vocab = d.V;
  a.c = d.c;
  a.slice = plan.slice;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(device).stream();
  if constexpr (sizeof(T) == 2) {
    if (plan.regs) {  // one row per cluster: grid.y = rows (rows * splits <= SMs, or forced)
      auto kernel = plan.splits == 8 ? k::topc_select_regs_kernel<T, 8, sel_regs_vecs(8)>
                                     : k::topc_select_regs_kernel<T, 4, sel_regs_vecs(4)>;
      allow_max_smem(kernel, device, plan.smem);
      launch_kernel(kernel, dim3(plan.splits, static_cast<unsigned>(rows)), dim3(plan.threads), plan.smem, stream,
                    plan.splits, a);
      return;
    }
  }
  auto pick = [&](auto cluster) {  // the instance for clusters of CTAs, or for one CTA a row
    constexpr bool kC = decltype(cluster)::value;
    return plan.threads == 256 ? (vec ? k::topc_select_kernel<T, true, 256, kC> : k::topc_select_kernel<T, false, 256, kC>)
                               : (vec ? k::topc_select_kernel<T, true, 512, kC> : k::topc_select_kernel<T, false, 512, kC>);
  };
  auto kernel = plan.splits > 1 ? pick(std::true_type{}) : pick(std::false_type{});
  // The dynamic shared-memory limit of the largest slice's, once per (kernel, device).
  allow_max_smem(kernel, device, plan.threads == 256 ? k::SelNarrow::smem(k::kSelMaxSlice) : k::SelWide::smem(k::kSelMaxSlice));
  launch_kernel(kernel, dim3(plan.splits, static_cast<unsigned>(std::min<int64_t>(rows, 65535))),
                dim3(plan.threads), plan.smem, stream, plan.splits, a);
}

// ---------------------------------------------------------------------------------------------
// hidden_mean_concat

template <typename T>
void launch_hidden_mean_concat(const HiddenConcatDims& d, const at::Tensor& h, at::Tensor& out) {
  k::HiddenConcatArgs<T> a{};
  a.h = cptr<T>(h);
  a.hs0 = h.stride(0);
  a.hs1 = h.stride(1);
  a.hs2 = h.stride(2);
  a.out = mptr<T>(out);
  a.N = d.N;
  a.B = d.B;
  a.H = d.H;
  constexpr int kV = k::kVecElems<T>;
  const bool vec = d.H % kV == 0 && a.hs2 == 1 && a.hs0 % kV == 0 && a.hs1 % kV == 0 &&
                   aligned16(h.const_data_ptr()) && aligned16(out.const_data_ptr());
  const int64_t threads = d.N * (vec ? d.H / kV : d.H);
  const int64_t ctas = (threads + k::kConcatThreads - 1) / k::kConcatThreads;
  TORCH_CHECK_VALUE(ctas <= std::numeric_limits<int32_t>::max(), "hidden_mean_concat: h of shape ", h.sizes(),
                    " is too large for one launch");
  launch_kernel(vec ? k::hidden_mean_concat_kernel<T, true> : k::hidden_mean_concat_kernel<T, false>,
                dim3(static_cast<unsigned>(ctas)), dim3(k::kConcatThreads), 0,
                at::cuda::getCurrentCUDAStream(h.get_device()).stream(), 1, a);
}

// ---------------------------------------------------------------------------------------------
// gather_rows

template <typename T>
void launch_gather_rows(const GatherRowsDims& d, const at::Tensor& table, const at::Tensor& ids,
                        at::Tensor& out) {
  const int device = table.get_device();
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(device);
  k::GatherRowsArgs<T> a{};
  a.table = cptr<T>(table);
  a.table_s = table.stride(0);
  a.ids = ids.const_data_ptr<int64_t>();
  a.out = mptr<T>(out);
  a.n = d.n;
  a.R = d.R;
  a.V = d.V;
  const bool vec = d.R % k::kVecElems<T> == 0 && rows_vectorizable(table, {a.table_s}) &&
                   aligned16(out.const_data_ptr());
  // Enough warps for every row group, at most 8 CTAs per SM (a grid-stride loop beyond).
  constexpr int64_t kRowsPerCta = k::kGatherRows * (k::kGatherThreads / 32);
  const int64_t ctas = std::min<int64_t>((d.n + kRowsPerCta - 1) / kRowsPerCta, 8LL * prop->multiProcessorCount);
  launch_kernel(vec ? k::gather_rows_kernel<T, true> : k::gather_rows_kernel<T, false>,
                dim3(static_cast<unsigned>(ctas)), dim3(k::kGatherThreads), 0,
                at::cuda::getCurrentCUDAStream(device).stream(), 1, a);
}

// ---------------------------------------------------------------------------------------------
// gather_gemv

// A row's warp tiles: kGemvRows candidates each.
int64_t gemv_tiles_per_row(int64_t M) { return (M + k::kGemvRows - 1) / k::kGemvRows; }

// The arguments both gather_gemv kernels share (out and the argmax fields unset).
template <typename T>
k::GatherGemvArgs<T> gather_gemv_args(const GatherGemvDims& d, const at::Tensor& table, const at::Tensor& ids,
                                      const at::Tensor& x, bool reverse, bool prefetch) {
  const auto st = gather_gemv_stride;
  k::GatherGemvArgs<T> a{};
  a.table = cptr<T>(table);
  a.table_s = table.stride(0);
  a.V = d.V;
  a.ids = ids.const_data_ptr<int64_t>();
  a.ids_s1 = st(ids, 0);
  a.ids_s2 = st(ids, 1);
  a.ids_sm = st(ids, 2);
  a.x = cptr<T>(x);
  a.x_s1 = st(x, 0);
  a.x_s2 = st(x, 1);
  a.M = d.M;
  a.K = d.K;
  const int64_t tiles_per_s = gemv_tiles_per_row(d.M);
  const int64_t tiles = d.S1 * d.S2 * tiles_per_s;
  TORCH_CHECK_VALUE(tiles <= std::numeric_limits<int32_t>::max(), "gather_gemv: ", d.S1 * d.S2 * d.M,
                    " dot products (ids.numel()) exceed one launch's ", int64_t{k::kGemvRows}, " * 2^31");
  a.S = static_cast<uint32_t>(d.S1 * d.S2);
  a.S2 = static_cast<uint32_t>(d.S2);
  a.tiles_per_s = static_cast<uint32_t>(tiles_per_s);
  a.tiles = static_cast<uint32_t>(tiles);
  a.reverse = reverse ? 1u : 0u;
  a.prefetch = prefetch ? 1u : 0u;
  return a;
}

// Whether the by-position CTA order pays: a table row is expected in at least 1.5 rows' lists
// (S * M >= 1.5 V: N >= 32 at the canonical head).
bool gemv_rows_shared(const GatherGemvDims& d) { return 2 * d.S1 * d.S2 * d.M >= 3 * d.V; }

bool gemv_vec(const GatherGemvDims& d, const at::Tensor& table, const at::Tensor& x, int64_t kv) {
  return d.K % kv == 0 && rows_vectorizable(table, {table.stride(0)}) &&
         rows_vectorizable(x, {gather_gemv_stride(x, 0), gather_gemv_stride(x, 1)});
}

template <typename T>
void launch_gather_gemv(const GatherGemvDims& d, const at::Tensor& table, const at::Tensor& ids,
                        const at::Tensor& x, at::Tensor& out, bool reverse, bool prefetch) {
  const int device = table.get_device();
  const auto st = gather_gemv_stride;
  k::GatherGemvArgs<T> a = gather_gemv_args<T>(d, table, ids, x, reverse, prefetch);
  a.out = mptr<T>(out);
  a.out_s1 = st(out, 0);
  a.out_s2 = st(out, 1);
  a.out_sm = st(out, 2);
  // The CTAs by position (gather_gemv.cuh's gemv_tile) when a row's tiles fill whole CTAs and a
  // table row is expected in at least 1.5 rows' lists (gemv_rows_shared).  Measured on the H200
  // (session 19, benchmarks/RESULTS.md; the head's six passes, alternating direction, candidates
  // sorted per row as topc_select writes them, µs a pass, by position / by row): 160 / 182 at N
  // = 256, 82-84 / 92-93 at 128, 43-44 / 47 at 64, 23.3-23.7 / 24.3-24.8 at 32; with each row's
  // ids shuffled 1-2 % slower from N = 32 on.
  // XPRESS_EXT_GEMV_ORDER (benchmarks): "position" / "row" forces the order (position only
  // where a row's tiles fill whole CTAs); unset: the rule.  Read at every call.
  const int order = env_choice("XPRESS_EXT_GEMV_ORDER", {"position", "row"}, -1);
  const bool by_position = a.tiles_per_s % k::kGemvWarps == 0 && (order < 0 ? gemv_rows_shared(d) : order == 0);
  const bool vec = gemv_vec(d, table, x, k::kVecElems<T>);
  const int64_t ctas = (int64_t{a.tiles} + k::kGemvWarps - 1) / k::kGemvWarps;
  const auto kernel = by_position ? (vec ? k::gather_gemv_kernel<T, true, true> : k::gather_gemv_kernel<T, false, true>)
                                  : (vec ? k::gather_gemv_kernel<T, true, false> : k::gather_gemv_kernel<T, false, false>);
  launch_kernel(kernel,
                dim3(static_cast<unsigned>(ctas)), dim3(k::kGemvThreads), 0,
                at::cuda::getCurrentCUDAStream(device).stream(), 1, a);
}

// XPRESS_EXT_GEMV_ARGMAX (benchmarks and tests): "fused" / "split" force gather_gemv_argmax_to_blk's
// one-launch cluster kernel (where a row's tiles fit one cluster) / its two launches; unset: the
// launcher's rule.  Read at every call (tests switch it within a process).
int gemv_argmax_mode() { return env_choice("XPRESS_EXT_GEMV_ARGMAX", {"fused", "split"}, -1); }

// gather_gemv_argmax_to_blk: the cluster kernel (a row's dot products and argmax in one launch)
// where a row's tiles fit one cluster of kGemvMaxCluster CTAs on an sm_90 device and the grid
// is one CTA an SM at most (the rows' lists then share few table rows, so the two-launch path's
// by-position order has nothing to share); else gather_gemv into a buffer of base_c's shape,
// then topc_argmax_to_blk (the same bits: both paths score dtype(base + dtype(dot)) in the same
// order).  Measured in the head's top-C step with prefetch (H200, session 35, RESULTS.md; µs a
// step, fused / split): 69.5-69.8 / 71.6-73.2 at N = 1 (120 CTAs), 98.7-99.3 / 97.8-101.2 at
// N = 4 (480 CTAs).  Session 32's version without prefetch lost at every N (80 registers, and
// its clusters scheduled only once the latent pass had finished).
template <typename T>
void launch_gather_gemv_argmax(const GatherGemvDims& d, const at::Tensor& table, const at::Tensor& cand,
                               const at::Tensor& lat, const at::Tensor& base_c, at::Tensor& blk, bool reverse,
                               bool prefetch) {
  const int device = table.get_device();
  const int64_t cpr = (gemv_tiles_per_row(d.M) + k::kGemvWarps - 1) / k::kGemvWarps;
  const int mode = gemv_argmax_mode();
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(device);
  const int64_t ctas = d.S1 * d.S2 * cpr;
  const bool fits = prop->major >= 9 && cpr <= k::kGemvMaxCluster && ctas <= std::numeric_limits<int32_t>::max();
  if (fits && (mode == 0 || (mode < 0 && ctas <= prop->multiProcessorCount && !gemv_rows_shared(d)))) {
    k::GatherGemvArgs<T> a = gather_gemv_args<T>(d, table, cand, lat, reverse, prefetch);
    a.base = cptr<T>(base_c);
    a.base_s1 = base_c.stride(0);
    a.base_s2 = base_c.stride(1);
    a.base_sm = base_c.stride(2);
    a.blk = mptr<int64_t>(blk);
    a.blk_s1 = blk.stride(0);
    a.blk_sb = blk.stride(1);
    a.ctas_per_row = static_cast<uint32_t>(cpr);
    const auto kernel = gemv_vec(d, table, lat, k::kVecElems<T>) ? k::gather_gemv_argmax_kernel<T, true>
                                                                  : k::gather_gemv_argmax_kernel<T, false>;
    launch_kernel(kernel, dim3(static_cast<unsigned>(ctas)), dim3(k::kGemvThreads), 0,
                  at::cuda::getCurrentCUDAStream(device).stream(), static_cast<int>(cpr), a);
    return;
  }
  at::Tensor bias = at::empty(cand.sizes(), base_c.options());
  launch_gather_gemv<T>(d, table, cand, lat, bias, reverse, prefetch);
  launch_topc_argmax<T>(TopcDims{d.S1, d.S2, d.M}, base_c, bias, cand, blk);
}

}  // namespace

void latent_pass_cuda(const at::Tensor& blk, const at::Tensor& tok_am1, const at::Tensor& xh,
                      at::Tensor& lat_out, const at::Tensor& w1, const at::Tensor& wlat_t,
                      const at::Tensor& mix_kjc, const at::Tensor& wg_t, const at::Tensor& wu_t,
                      const at::Tensor& wd_t, bool do_mlp, bool prefetch_weights,
                      const std::optional<at::Tensor>& emb_lat, const std::optional<at::Tensor>& wpack) {
  const LatentDims d =
      check_latent_pass(blk, tok_am1, xh, lat_out, w1, wlat_t, mix_kjc, wg_t, wu_t, wd_t, emb_lat, wpack);
  const c10::cuda::OptionalCUDAGuard guard(blk.device());
  if (d.N == 0 || d.B <= 1) return;
  if (validate_enabled()) check_latent_ids(d, blk, tok_am1);
  XPRESS_DISPATCH_FLOAT(xh.scalar_type(), "latent_pass", __nv_bfloat16, __half, float, [&] {
    launch_latent_pass<scalar_t>(d, blk, tok_am1, xh, lat_out, w1, wlat_t, mix_kjc, wg_t, wu_t,
                                 wd_t, do_mlp, prefetch_weights, emb_lat, wpack);
  });
}

at::Tensor latent_embed_table_cuda(const at::Tensor& w1, const at::Tensor& wlat_t) {
  const LatentTableDims d = check_latent_embed_table(w1, wlat_t);
  const c10::cuda::OptionalCUDAGuard guard(w1.device());
  at::Tensor out = at::empty({d.V, d.R}, w1.options().dtype(at::kFloat));
  if (d.V == 0) return out;
  const int device = w1.get_device();
  const size_t smem_limit = at::cuda::getDeviceProperties(device)->sharedMemPerBlockOptin;
  XPRESS_DISPATCH_FLOAT(w1.scalar_type(), "latent_embed_table", __nv_bfloat16, __half, float, [&] {
    using T = scalar_t;
    constexpr int eb = static_cast<int>(sizeof(T));
    const int R = static_cast<int>(d.R);
    k::LatentTableArgs<T> a{};
    a.w1 = cptr<T>(w1);
    a.w1_s = w1.stride(0);
    a.wlat = cptr<T>(wlat_t);
    a.wlat_s = wlat_t.stride(0);
    a.out = out.mutable_data_ptr<float>();
    a.out_s = out.stride(0);
    a.V = d.V;
    a.R = R;
    a.kr = k::round_up(R, 16);
    a.ks1 = latent_table_ks1(R, eb);
    a.ld_a = k::smem_ld_act(a.kr, eb);
    // The largest tile that fits: 64 rows x 64 columns, halving rows, then columns.
    a.tm = 64;
    a.tn = std::min(64, k::round_up(R, 8));
    auto smem = [&] { return k::latent_table_smem<T>(a.tm, a.ld_a, a.kr, k::smem_ld_weight(a.tn, eb)); };
    while (smem() > smem_limit && (a.tm > 16 || a.tn > 8)) {
      if (a.tm > 16) {
        a.tm /= 2;
      } else {
        a.tn = k::round_up(a.tn / 2, 8);
      }
    }
    TORCH_CHECK_VALUE(smem() <= smem_limit, "latent_embed_table: R=", R, " needs ", smem(),
                      " bytes of shared memory per CTA; this GPU allows ", smem_limit);
    a.ld_b = k::smem_ld_weight(a.tn, eb);
    constexpr int kV = k::kVecElems<T>;
    a.vec_w1 = R % kV == 0 && rows_vectorizable(w1, {w1.stride(0)});
    a.vec_wlat = R % kV == 0 && rows_vectorizable(wlat_t, {wlat_t.stride(0)});
    const auto kernel = k::latent_table_kernel<T>;
    allow_max_smem(kernel, device);
    launch_kernel(kernel, dim3(static_cast<unsigned>((d.V + a.tm - 1) / a.tm), static_cast<unsigned>((R + a.tn - 1) / a.tn)),
                  dim3(k::kLatentThreads), smem(), at::cuda::getCurrentCUDAStream(device).stream(), 1, a);
  });
  return out;
}

std::vector<int64_t> latent_pass_plan(int64_t N, int64_t B, int64_t R, int64_t H,
                                      c10::ScalarType dtype, int64_t device) {
  TORCH_CHECK_VALUE(N >= 1 && B >= 2 && R >= 1 && H >= 1, "latent_pass_plan: need N >= 1, B >= 2, "
                    "R >= 1, H >= 1; got N=", N, " B=", B, " R=", R, " H=", H);
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  return XPRESS_DISPATCH_FLOAT(dtype, "latent_pass_plan", __nv_bfloat16, __half, float, [&] {
    const LatentPlan<scalar_t> p = plan_latent_pass<scalar_t>(N, static_cast<int>(B), static_cast<int>(R),
                                                    static_cast<int>(H), static_cast<int>(device));
    return std::vector<int64_t>{p.tiling.cluster, p.tiling.blocks_per_group, p.tiling.rows,
                                static_cast<int64_t>(p.tiling.smem_bytes), p.max_clusters,
                                p.grid_clusters, p.groups, 16 * p.rows_mt, p.row_tiles,
                                p.fixed ? 1 : 0, p.full_groups, p.tail_blocks, p.sched_groups, p.tile_ctas};
  });
}

std::vector<int64_t> topc_select_plan(int64_t rows, int64_t V, int64_t c, int64_t device, int64_t sm_margin) {
  TORCH_CHECK_VALUE(rows >= 1 && V >= 1 && c >= 1 && c <= V && sm_margin >= 0, "topc_select_plan: need rows >= 1, "
                    "1 <= c <= V and sm_margin >= 0; got rows=", rows, " V=", V, " c=", c, " sm_margin=", sm_margin);
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  // As for 16-bit logits with 16-byte aligned rows.
  const TopcSelectPlan p =
      plan_topc_select(rows, V, c, true, sm_margin, at::cuda::getDeviceProperties(static_cast<int>(device)));
  return std::vector<int64_t>{p.splits, p.threads, p.slice, static_cast<int64_t>(p.smem), p.regs ? 1 : 0};
}

void add_argmax_to_blk_cuda(const at::Tensor& base, const std::optional<at::Tensor>& bias, at::Tensor& blk) {
  const AddArgmaxDims d = check_add_argmax(base, bias, blk);
  const c10::cuda::OptionalCUDAGuard guard(blk.device());
  if (d.N * d.Bm1 == 0) return;
  XPRESS_DISPATCH_FLOAT(base.scalar_type(), "add_argmax_to_blk", __nv_bfloat16, __half, float,
                        [&] { launch_add_argmax<scalar_t>(d, base, bias, blk); });
}

void readout_argmax_to_blk_cuda(const at::Tensor& base, const at::Tensor& lat, const at::Tensor& w2, at::Tensor& blk,
                                const std::optional<at::Tensor>& bias, bool prefetch_weights, bool reverse) {
  const ReadoutDims d = check_readout_argmax(base, lat, w2, blk, bias);
  const c10::cuda::OptionalCUDAGuard guard(blk.device());
  if (d.a.N * d.a.Bm1 == 0) return;
  XPRESS_DISPATCH_FLOAT(base.scalar_type(), "readout_argmax_to_blk", __nv_bfloat16, __half, float,
                        [&] { launch_readout_argmax<scalar_t>(d, base, lat, w2, blk, bias, prefetch_weights, reverse); });
}

void topc_argmax_to_blk_cuda(const at::Tensor& base_c, const at::Tensor& bias_c,
                             const at::Tensor& cand, at::Tensor& blk) {
  const TopcDims d = check_topc_argmax(base_c, bias_c, cand, blk);
  const c10::cuda::OptionalCUDAGuard guard(blk.device());
  if (d.N * d.Bm1 == 0) return;
  if (validate_enabled()) check_topc_ids(cand);
  XPRESS_DISPATCH_FLOAT(base_c.scalar_type(), "topc_argmax_to_blk", __nv_bfloat16, __half, float,
                        [&] { launch_topc_argmax<scalar_t>(d, base_c, bias_c, cand, blk); });
}

void topc_select_cuda(const at::Tensor& logits, int64_t c, at::Tensor& values, at::Tensor& ids,
                      const std::optional<at::Tensor>& blk, int64_t sm_margin) {
  const TopcSelectDims d = check_topc_select(logits, c, values, ids, blk, sm_margin);
  const c10::cuda::OptionalCUDAGuard guard(logits.device());
  if (d.N * d.Bm1 == 0) return;
  XPRESS_DISPATCH_FLOAT(logits.scalar_type(), "topc_select", __nv_bfloat16, __half, float,
                        [&] { launch_topc_select<scalar_t>(d, logits, values, ids, blk, sm_margin); });
}

void hidden_mean_concat_cuda(const at::Tensor& h, at::Tensor& out) {
  const HiddenConcatDims d = check_hidden_mean_concat(h, out);
  const c10::cuda::OptionalCUDAGuard guard(h.device());
  if (d.N * d.H == 0) return;
  XPRESS_DISPATCH_FLOAT(h.scalar_type(), "hidden_mean_concat", __nv_bfloat16, __half, float,
                        [&] { launch_hidden_mean_concat<scalar_t>(d, h, out); });
}

void gather_rows_cuda(const at::Tensor& table, const at::Tensor& ids, at::Tensor& out) {
  const GatherRowsDims d = check_gather_rows(table, ids, out);
  const c10::cuda::OptionalCUDAGuard guard(table.device());
  if (d.n == 0) return;
  if (validate_enabled()) check_gather_ids(d, ids);
  XPRESS_DISPATCH_FLOAT(table.scalar_type(), "gather_rows", __nv_bfloat16, __half, float,
                        [&] { launch_gather_rows<scalar_t>(d, table, ids, out); });
}

void gather_gemv_cuda(const at::Tensor& table, const at::Tensor& ids, const at::Tensor& x, at::Tensor& out,
                      bool reverse, bool prefetch) {
  const GatherGemvDims d = check_gather_gemv(table, ids, x, out);
  const c10::cuda::OptionalCUDAGuard guard(table.device());
  if (ids.numel() == 0) return;
  if (validate_enabled()) check_gather_gemv_ids(d, ids);
  XPRESS_DISPATCH_FLOAT(table.scalar_type(), "gather_gemv", __nv_bfloat16, __half, float,
                        [&] { launch_gather_gemv<scalar_t>(d, table, ids, x, out, reverse, prefetch); });
}

void gather_gemv_argmax_to_blk_cuda(const at::Tensor& table, const at::Tensor& cand, const at::Tensor& lat,
                                    const at::Tensor& base_c, at::Tensor& blk, bool reverse, bool prefetch) {
  const GatherGemvDims d = check_gather_gemv_argmax(table, cand, lat, base_c, blk);
  const c10::cuda::OptionalCUDAGuard guard(table.device());
  if (cand.numel() == 0) return;
  if (validate_enabled()) check_gather_gemv_ids(d, cand, "gather_gemv_argmax_to_blk", "cand");
  XPRESS_DISPATCH_FLOAT(table.scalar_type(), "gather_gemv_argmax_to_blk", __nv_bfloat16, __half, float,
                        [&] { launch_gather_gemv_argmax<scalar_t>(d, table, cand, lat, base_c, blk, reverse, prefetch); });
}

}  // namespace xpress
