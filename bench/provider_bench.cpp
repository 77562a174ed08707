// sandboxd_bench: the provider's own cost, measured. DeerFlow's provider-benchmark scenarios
// run against an in-process backend that answers at once (so every microsecond is the core's:
// registry, locks, leases, directories), with the memory or SQLite lease store, at concurrency
// 1 and 8; then how the warm path holds up with 1,000 and 10,000 other active conversations,
// shutdown with 1,000 and 10,000 tracked sandboxes, and RSS per tracked sandbox.
//
//   sandboxd_bench [--iterations N] [--jsonl FILE] [--only SCENARIO] [--quick]
//
// One JSON object per measured operation goes to --jsonl (scenario, backend, store,
// concurrency, iteration, acquire_us, release_us, path, success, error); a summary table
// (min, median, p90, p99, max) goes to stdout. Not run by ctest: speed goals live here and in
// BENCHMARKS.md, never in timed unit tests.
#include <malloc.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "quiet_logger.hpp"
#include "sandboxd/capabilities.hpp"
#include "sandboxd/clock.hpp"
#include "sandboxd/core/paths.hpp"
#include "sandboxd/core/plugin_loader.hpp"
#include "sandboxd/core/provider.hpp"
#include "sandboxd/core/thread_storage.hpp"
#include "sandboxd/core/usage_sampler.hpp"
#include "sandboxd/json.hpp"
#include "sandboxd/sdk.hpp"

namespace {

using namespace sandboxd;
using namespace sandboxd::core;
using sandboxd::bench::QuietLogger;
using Clock = std::chrono::steady_clock;

// Answers every call at once; a create makes a SandboxInfo and nothing else. Lock story:
// `mutex_` guards `live_`.
class InstantBackend final : public SandboxBackend,
                             public sandboxd::SandboxUsage,
                             public sandboxd::WritableLayerUsage {
 public:
  SandboxInfo create(const CreateRequest& request) override {
    SandboxInfo info;
    info.sandbox_id = request.sandbox_id;
    info.sandbox_url = "http://127.0.0.1:1";
    info.user_id = request.user_id;
    info.thread_id = request.thread_id;
    info.mount_contract_version = kSandboxMountContractVersion;
    std::lock_guard lock(mutex_);
    live_[request.sandbox_id] = info;
    return info;
  }
  void destroy(const SandboxInfo& info) override {
    std::lock_guard lock(mutex_);
    live_.erase(info.sandbox_id);
  }
  bool is_alive(const SandboxInfo& info) override {
    std::lock_guard lock(mutex_);
    return live_.count(info.sandbox_id) > 0;
  }
  std::optional<SandboxInfo> discover(const std::string&) override { return std::nullopt; }
  MountModeKind mount_mode_kind() const override { return MountModeKind::local_bind_mounts; }
  // Answers after a pause, as an engine's one-shot stats do from its own process (measured
  // here: 20 ms for podman's through curl, most of it curl's start; 2 ms is the engine's).
  Reading usage(const SandboxInfo&) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    Reading reading;
    reading.cpu_seconds = 1.0;
    reading.host_cpu_seconds = 1000.0;
    reading.memory_bytes = 1u << 20;
    reading.pids = 2;
    return reading;
  }
  // A layer's size after layer_look_micros (an engine walks the layer: 4.6 ms median measured
  // on podman for inspect with size=true of a one-file layer, more for many files; the
  // layer_watch scenario uses 2 ms, 0 to time the pass's own work).
  std::optional<std::uint64_t> writable_layer_bytes(const SandboxInfo&) override {
    if (const int micros = layer_look_micros.load()) {
      std::this_thread::sleep_for(std::chrono::microseconds(micros));
    }
    layer_looks.fetch_add(1);
    return std::uint64_t{1} << 20;
  }
  std::atomic<int> layer_look_micros{2000};
  std::atomic<std::uint64_t> layer_looks{0};

 private:
  std::mutex mutex_;
  // A hash map as an engine's own index would be: the core's cost is what is measured.
  std::unordered_map<std::string, SandboxInfo> live_;
};

struct Row {
  std::string scenario;
  std::string store;
  int concurrency = 1;
  int iteration = 0;
  double acquire_us = 0;
  double release_us = 0;
  std::string path;
  bool success = true;
  std::string error;
  double started = 0;  // seconds since the bench began, for pairs/s over the scenario's span
  double ended = 0;
};

struct Settings {
  int iterations = 2000;
  std::string jsonl;
  std::string only;
  std::string store;    // empty: memory and sqlite
  int concurrency = 0;  // 0: 1 and 8
  bool quick = false;
  int others = 0;  // probe_warm: conversations left active beside the measured one
};

double micros(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

class Bench {
 public:
  explicit Bench(Settings settings) : settings_(std::move(settings)) {
    if (!settings_.jsonl.empty()) jsonl_.open(settings_.jsonl);
    base_ =
        std::filesystem::temp_directory_path() / ("sandboxd-bench-" + std::to_string(::getpid()));
    std::filesystem::create_directories(base_);
  }
  ~Bench() {
    if (keep_dirs_) return;
    std::error_code ignored;
    std::filesystem::remove_all(base_, ignored);
  }

  bool wanted(const std::string& scenario) const {
    return settings_.only.empty() || settings_.only == scenario;
  }

  std::unique_ptr<Provider> provider(const std::string& store, int replicas, int idle_timeout,
                                     std::shared_ptr<sandboxd::Clock> clock = nullptr,
                                     std::uint64_t disk_limit = 0, bool background = false) {
    const std::filesystem::path dir = base_ / ("p" + std::to_string(next_dir_++));
    std::filesystem::create_directories(dir);
    auto logger = std::make_shared<QuietLogger>();
    if (!clock) clock = std::make_shared<SystemClock>();
    PluginContext context;
    context.config_key_path = "sandbox.ownership";
    context.owner_id = "bench:" + std::to_string(next_dir_);
    context.base_dir = dir.string();
    context.logger = logger;
    context.clock = clock;
    std::string use = "ownership_memory:MemoryOwnershipStore";
    if (store == "sqlite") {
      use = "ownership_sqlite:SqliteOwnershipStore";
      context.config_json = R"({"path": ")" + (dir / "leases.db").string() + R"("})";
    }
    ProviderDeps deps;
    last_backend_ = std::make_shared<InstantBackend>();
    deps.backend = last_backend_;
    deps.ownership =
        PluginLoader({SANDBOXD_BENCH_PLUGIN_DIR}).load_ownership_store(use, context, "bench");
    deps.logger = logger;
    deps.clock = clock;
    Paths paths(dir, dir.string());
    if (disk_limit > 0) {
      // The bound's number is what the layer watch compares with; the directories' own
      // mechanism (btrfs here or not) plays no part in these scenarios.
      paths.set_storage(sandboxd::core::ThreadStorage::for_base_dir(dir, disk_limit, "bench"));
    }
    deps.paths = std::make_shared<const Paths>(std::move(paths));
    deps.options.replicas = replicas;
    deps.options.idle_timeout = idle_timeout;
    // With a bound and background threads, the layer watcher runs, its passes back to back.
    deps.options.run_background_threads = background;
    deps.options.idle_check_interval_seconds = 0.05;
    deps.options.reconcile_on_start = false;
    deps.hooks.wait_until_ready = [](const std::string&, double) { return true; };
    auto out = std::make_unique<Provider>(std::move(deps));
    out->start();
    return out;
  }

  void record(const Row& row) {
    if (row.scenario.empty()) return;  // warm-up
    // A worker of run_threads keeps its rows to itself until it is joined: one lock shared by
    // 8 workers (and a file write under it) made the bench's own convoy part of the figure.
    if (t_worker_rows) {
      t_worker_rows->push_back(row);
      return;
    }
    keep(row);
  }
  void keep(const Row& row) {
    std::lock_guard lock(rows_mutex_);
    rows_.push_back(row);
    if (jsonl_) jsonl_ << jsonl_row(row) << '\n';
  }

  static std::string jsonl_row(const Row& row) {
    rapidjson::StringBuffer buffer;
    rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
    auto text = [&w](const char* key, const std::string& value) {
      write_json_member(w, key, value);
    };
    w.StartObject();
    text("scenario", row.scenario);
    text("backend", "in_process");
    text("store", row.store);
    w.Key("concurrency");
    w.Int(row.concurrency);
    w.Key("iteration");
    w.Int(row.iteration);
    w.Key("acquire_us");
    w.Double(row.acquire_us);
    w.Key("release_us");
    w.Double(row.release_us);
    text("path", row.path);
    w.Key("success");
    w.Bool(row.success);
    w.Key("error");
    if (row.error.empty()) {
      w.Null();
    } else {
      write_json_string(w, row.error);
    }
    w.EndObject();
    return buffer.GetString();
  }

  // One acquire (+ release unless keep) on `thread`, recorded.
  void pair(Provider& p, const std::string& scenario, const std::string& store, int concurrency,
            int iteration, const std::string& thread, bool release = true) {
    Row row{scenario, store, concurrency, iteration};
    const auto t0 = Clock::now();
    try {
      const AcquireResult result = p.acquire_traced(thread, "bench-user");
      const auto t1 = Clock::now();
      if (release) p.release(result.sandbox_id);
      const auto t2 = Clock::now();
      row.acquire_us = micros(t1 - t0);
      row.release_us = release ? micros(t2 - t1) : 0.0;
      row.path = to_string(result.path);
    } catch (const std::exception& error) {
      row.success = false;
      row.error = error.what();
    }
    row.started = std::chrono::duration<double>(t0 - epoch_).count();
    row.ended = std::chrono::duration<double>(Clock::now() - epoch_).count();
    record(row);
  }

  // ── DeerFlow's scenarios ──

  void warm_same_thread(const std::string& store, int concurrency) {
    auto p = provider(store, 16 * concurrency, 0);
    run_threads(concurrency, [&](int worker) {
      const std::string thread = "warm-" + std::to_string(worker);
      pair(*p, "", store, concurrency, -1, thread);  // the cold one: warm-up, not recorded
      for (int i = 0; i < iterations(); ++i) {
        pair(*p, "warm_same_thread", store, concurrency, i, thread);
      }
    });
    p->shutdown();
  }

  void cold_unique_thread(const std::string& store, int concurrency) {
    // Enough replicas that nothing is evicted: the cost of a new conversation alone.
    const int n = std::max(1, iterations() / 4);
    auto p = provider(store, n * concurrency + 8, 0);
    run_threads(concurrency, [&](int worker) {
      for (int i = 0; i < n; ++i) {
        pair(*p, "cold_unique_thread", store, concurrency, i,
             "cold-" + std::to_string(worker) + "-" + std::to_string(i));
      }
    });
    p->shutdown();
  }

  // Many conversations, each released to the warm pool; every acquire reclaims a different one.
  void warm_miss_many_threads(const std::string& store, int concurrency) {
    constexpr int kConversations = 64;
    auto p = provider(store, kConversations * concurrency + 8, 0);
    run_threads(concurrency, [&](int worker) {
      for (int c = 0; c < kConversations; ++c) {
        pair(*p, "", store, concurrency, -1,
             "many-" + std::to_string(worker) + "-" + std::to_string(c));
      }
      for (int i = 0; i < iterations(); ++i) {
        pair(*p, "warm_miss_many_threads", store, concurrency, i,
             "many-" + std::to_string(worker) + "-" + std::to_string(i % kConversations));
      }
    });
    p->shutdown();
  }

  // replicas = 3 and every acquire a new conversation: each create evicts the oldest warm one.
  void replica_pressure(const std::string& store) {
    auto p = provider(store, 3, 0);
    const int n = std::max(1, iterations() / 4);
    for (int i = 0; i < n; ++i) {
      pair(*p, "replica_pressure", store, 1, i, "pressure-" + std::to_string(i));
    }
    p->shutdown();
  }

  // N warm sandboxes past the idle timeout: one idle pass reaps them all; the row is per reap.
  void idle_timeout(const std::string& store) {
    auto clock = std::make_shared<ManualSteadyClock>();
    const int n = settings_.quick ? 200 : 1000;
    auto p = provider(store, n + 8, 60, clock);
    for (int i = 0; i < n; ++i) p->release(p->acquire("idle-" + std::to_string(i), "bench-user"));
    clock->advance(3600);
    const auto t0 = Clock::now();
    p->reap_expired_warm(60);
    const double per = micros(Clock::now() - t0) / n;
    const std::size_t left = p->export_registry().sandboxes.size();
    Row row{"idle_timeout",
            store,
            1,
            0,
            per,
            0,
            "reaped",
            left == 0,
            left == 0 ? "" : std::to_string(left) + " left"};
    record(row);
    p->shutdown();
  }

  // For `strace -c` and `valgrind --tool=callgrind` (scripts in BENCHMARKS.md): exactly N new
  // conversations (or N warm pairs) on the memory store, one thread, nothing else measured.
  void probe(const std::string& what) {
    auto p = provider(what == "probe_warm_sqlite" ? "sqlite" : "memory",
                      iterations() + settings_.others + 8, 0);
    for (int i = 0; i < settings_.others; ++i) {
      p->acquire("other-" + std::to_string(i), "bench-user");
    }
    if (what == "probe_cold") {
      for (int i = 0; i < iterations(); ++i) p->acquire("probe-" + std::to_string(i), "bench-user");
    } else {
      p->release(p->acquire("probe", "bench-user"));
      measured_warm_pairs(*p, iterations());
    }
    p->detach();
    keep_dirs_ = true;  // removing them would count too; the caller removes what this prints
    std::printf("%s\n", base_.string().c_str());
  }

  // The N warm pairs alone, in a function of their own: `callgrind --toggle-collect=` this
  // counts them without the setup (scripts/bench.sh's scan over --others).
  [[gnu::noinline]] static void measured_warm_pairs(Provider& p, int n) {
    for (int i = 0; i < n; ++i) p.release(p.acquire("probe", "bench-user"));
  }

  // ── growth ──

  // The warm pair on one conversation while `others` other conversations are active.
  void warm_pair_with_others(int others) {
    auto p = provider("memory", others + 16, 0);
    fill_active(*p, others);
    const std::string scenario = "warm_pair_with_" + std::to_string(others) + "_active";
    pair(*p, "", "memory", 1, -1, "the-one");
    for (int i = 0; i < iterations(); ++i) pair(*p, scenario, "memory", 1, i, "the-one");
    p->shutdown();
  }

  // Makes `others` active conversations beside the one the pairs use.
  static void fill_active(Provider& p, int others) {
    for (int i = 0; i < others; ++i) p.acquire("other-" + std::to_string(i), "bench-user");
  }

  // The warm pairs of a scenario spaced 1 ms apart, so that they span several sweeps of
  // whatever runs beside them.
  void spaced_pairs(Provider& p, const std::string& scenario) {
    pair(p, "", "memory", 1, -1, "the-one");
    for (int i = 0; i < iterations(); ++i) {
      pair(p, scenario, "memory", 1, i, "the-one");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  // The warm pair beside 500 active conversations, alone and while the operator
  // page's sampler sweeps all 500 without a pause (every sandbox read from the backend, 2 ms
  // each, a page asking for the figures every 100 ms): the sampling is off the request path
  // when the two agree. The pairs are spaced 1 ms apart so that they span several sweeps.
  void warm_pair_beside_usage_sampling(bool sampling, const std::string& label) {
    constexpr int kTracked = 500;
    auto p = provider("memory", kTracked + 16, 0);
    fill_active(*p, kTracked);
    std::optional<sandboxd::core::UsageSampler> sampler;
    std::atomic<bool> done{false};
    std::thread viewer;
    if (sampling) {
      sampler.emplace(*p, std::make_shared<SystemClock>(),
                      sandboxd::core::UsageSamplerOptions{.interval_seconds = 0});
      sampler->start();
      viewer = std::thread([&] {
        while (!done) {
          sampler->view();
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
      });
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // sweeping by now
    }
    spaced_pairs(*p, "warm_pair_500_" + label);
    if (sampling) {
      done = true;
      viewer.join();
      std::printf("usage sampler: %zu sandboxes in its last sweep, during %.1f s of pairs\n",
                  sampler->view().sandboxes.size(), iterations() * 1.1e-3);
      sampler.reset();
    }
    p->shutdown();
  }

  // The warm pair beside 500 active conversations, without the writable-layer watch and with
  // it sweeping them (each look 2 ms, passes back to back: more often than an engine's looks
  // allow); the watch is off the request path when the two agree.
  void warm_pair_beside_layer_watch(bool watching, const std::string& label) {
    constexpr int kTracked = 500;
    auto p = provider("memory", kTracked + 16, 0, nullptr, watching ? (10ull << 30) : 0,
                      /*background=*/true);
    fill_active(*p, kTracked);
    const auto looks_before = last_backend_->layer_looks.load();
    const auto t0 = Clock::now();
    spaced_pairs(*p, "warm_pair_500_" + label);
    if (watching) {
      const double seconds = micros(Clock::now() - t0) / 1e6;
      const auto looks = last_backend_->layer_looks.load() - looks_before;
      std::printf("layer watch: %llu looks during %.1f s of pairs (%.0f a second)\n",
                  static_cast<unsigned long long>(looks), seconds, looks / seconds);
    }
    p->shutdown();
  }

  // One writable-layer pass with looks that answer at once: the pass's own work (choosing its
  // 256 under the registry mutex, then 256 calls) with `tracked` sandboxes.
  void layer_pass_with(int tracked) {
    auto p = provider("memory", tracked + 16, 0, nullptr, 10ull << 30);
    last_backend_->layer_look_micros = 0;
    for (int i = 0; i < tracked; ++i) p->acquire("layer-" + std::to_string(i), "bench-user");
    for (int i = 0; i < iterations() / 10 + 1; ++i) {
      const auto t0 = Clock::now();
      p->stop_layers_past_bound();
      record(Row{"layer_pass_" + std::to_string(tracked) + "_tracked", "memory", 1, i,
                 micros(Clock::now() - t0), 0, "pass", true, ""});
    }
    p->shutdown();
  }

  void shutdown_with(int tracked) {
    auto p = provider("memory", tracked + 16, 0);
    for (int i = 0; i < tracked; ++i) {
      const std::string id = p->acquire("shut-" + std::to_string(i), "bench-user");
      if (i % 2) p->release(id);  // half active, half warm
    }
    const auto t0 = Clock::now();
    p->shutdown();
    Row row{"shutdown_" + std::to_string(tracked) + "_tracked",
            "memory",
            1,
            0,
            micros(Clock::now() - t0),
            0,
            "shutdown",
            true,
            ""};
    record(row);
  }

  // Heap bytes in use per tracked sandbox (the allocator's own count: RSS moves in pages and
  // keeps what earlier scenarios freed, so it cannot resolve two kilobytes).
  void rss_per_sandbox() {
    const long before = heap_in_use();
    auto p = provider("memory", 20000, 0);
    constexpr int kTracked = 10000;
    for (int i = 0; i < kTracked; ++i) p->acquire("rss-" + std::to_string(i), "bench-user");
    const long after = heap_in_use();
    rss_per_sandbox_bytes_ = double(after - before) / kTracked;
    p->shutdown();
  }

  // ── reporting ──

  void summary() const {
    std::map<std::tuple<std::string, std::string, int>, std::vector<const Row*>> groups;
    for (const Row& row : rows_) {
      if (!row.scenario.empty()) groups[{row.scenario, row.store, row.concurrency}].push_back(&row);
    }
    std::printf("%-30s %-7s %4s %6s %9s %9s %9s %9s %9s %9s %6s\n", "scenario", "store", "conc",
                "n", "min_us", "median_us", "p90_us", "p99_us", "max_us", "pairs/s", "fails");
    for (const auto& [key, rows] : groups) {
      std::vector<double> totals;
      int fails = 0;
      double first = rows.front()->started, last = rows.front()->ended;
      for (const Row* row : rows) {
        if (!row->success) ++fails;
        totals.push_back(row->acquire_us + row->release_us);
        first = std::min(first, row->started);
        last = std::max(last, row->ended);
      }
      std::sort(totals.begin(), totals.end());
      auto at = [&](double q) {
        return totals[std::min(totals.size() - 1, std::size_t(q * totals.size()))];
      };
      const auto& [scenario, store, concurrency] = key;
      const double pairs_per_s = last > first ? double(rows.size()) / (last - first) : 0.0;
      std::printf("%-30s %-7s %4d %6zu %9.1f %9.1f %9.1f %9.1f %9.1f %9.0f %6d\n", scenario.c_str(),
                  store.c_str(), concurrency, totals.size(), totals.front(), at(0.5), at(0.9),
                  at(0.99), totals.back(), pairs_per_s, fails);
    }
    if (rss_per_sandbox_bytes_ > 0) {
      std::printf("memory per tracked sandbox (10,000 active, heap in use): %.0f bytes\n",
                  rss_per_sandbox_bytes_);
    }
  }

  int iterations() const { return settings_.iterations; }
  bool quick() const { return settings_.quick; }

 private:
  class ManualSteadyClock final : public sandboxd::Clock {
   public:
    double wall_now() const override { return 1.7e9 + offset_.load(); }
    double monotonic_now() const override {
      return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
                 .count() +
             offset_.load();
    }
    void advance(double seconds) { offset_.fetch_add(seconds); }

   private:
    std::atomic<double> offset_{0.0};
  };

  void run_threads(int n, const std::function<void(int)>& body) {
    std::vector<std::vector<Row>> rows(static_cast<std::size_t>(n));
    std::vector<std::thread> threads;
    for (int worker = 0; worker < n; ++worker) {
      std::vector<Row>& own = rows[static_cast<std::size_t>(worker)];
      own.reserve(static_cast<std::size_t>(iterations()) + 64);
      threads.emplace_back([&body, &own, worker] {
        t_worker_rows = &own;
        body(worker);
        t_worker_rows = nullptr;
      });
    }
    for (auto& thread : threads) thread.join();
    for (const auto& own : rows) {
      for (const Row& row : own) keep(row);
    }
  }

  static long heap_in_use() {
    const struct mallinfo2 info = ::mallinfo2();
    return static_cast<long>(info.uordblks + info.hblkhd);
  }

  Settings settings_;
  std::ofstream jsonl_;
  std::filesystem::path base_;
  int next_dir_ = 0;
  std::shared_ptr<InstantBackend> last_backend_;  // the backend of the last provider() made
  bool keep_dirs_ = false;
  static inline thread_local std::vector<Row>* t_worker_rows = nullptr;  // set by run_threads
  std::mutex rows_mutex_;
  std::vector<Row> rows_;
  const Clock::time_point epoch_ = Clock::now();
  double rss_per_sandbox_bytes_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Settings settings;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "sandboxd_bench: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--iterations") {
      settings.iterations = std::atoi(value().c_str());
    } else if (arg == "--jsonl") {
      settings.jsonl = value();
    } else if (arg == "--only") {
      settings.only = value();
    } else if (arg == "--store") {
      settings.store = value();
      if (settings.store != "memory" && settings.store != "sqlite") {
        std::fprintf(stderr, "sandboxd_bench: --store must be memory or sqlite, got '%s'\n",
                     settings.store.c_str());
        return 2;
      }
    } else if (arg == "--concurrency") {
      settings.concurrency = std::atoi(value().c_str());
      if (settings.concurrency != 1 && settings.concurrency != 8) {
        std::fprintf(stderr, "sandboxd_bench: --concurrency must be 1 or 8\n");
        return 2;
      }
    } else if (arg == "--others") {
      settings.others = std::atoi(value().c_str());
      if (settings.others < 0) {
        std::fprintf(stderr, "sandboxd_bench: --others must be 0 or more, got '%s'\n", argv[i]);
        return 2;
      }
    } else if (arg == "--quick") {
      settings.quick = true;
      settings.iterations = 200;
    } else if (arg == "--help" || arg == "-h") {
      std::printf(
          "Usage: sandboxd_bench [--iterations N] [--jsonl FILE] [--only SCENARIO] [--quick]\n"
          "                      [--store memory|sqlite] [--concurrency 1|8] [--others K]\n"
          "Scenarios: warm_same_thread cold_unique_thread warm_miss_many_threads\n"
          "replica_pressure idle_timeout warm_pair_with_others usage_sampling layer_watch\n"
          "shutdown rss\n"
          "Probes for strace/callgrind (N = --iterations; prints the state directory it leaves\n"
          "for the caller to remove): probe_cold\n"
          "(N new conversations), probe_warm, probe_warm_sqlite (N warm pairs on one\n"
          "conversation, memory or SQLite leases; --others K leaves K other conversations\n"
          "active first, so a pair's cost can be read at fleet size)\n"
          "(in-process backend; memory and SQLite lease stores; concurrency 1 and 8)\n");
      return 0;
    } else {
      std::fprintf(stderr, "sandboxd_bench: unknown argument '%s' (see --help)\n", arg.c_str());
      return 2;
    }
  }
  if (settings.iterations < 1) {
    std::fprintf(stderr, "sandboxd_bench: --iterations must be at least 1\n");
    return 2;
  }
  Bench bench(settings);
  if (settings.only == "probe_cold" || settings.only == "probe_warm" ||
      settings.only == "probe_warm_sqlite") {
    bench.probe(settings.only);
    return 0;
  }
  for (const std::string store : {"memory", "sqlite"}) {
    if (!settings.store.empty() && store != settings.store) continue;
    for (int concurrency : {1, 8}) {
      if (settings.concurrency && concurrency != settings.concurrency) continue;
      if (bench.wanted("warm_same_thread")) bench.warm_same_thread(store, concurrency);
      if (bench.wanted("cold_unique_thread")) bench.cold_unique_thread(store, concurrency);
      if (bench.wanted("warm_miss_many_threads")) {
        bench.warm_miss_many_threads(store, concurrency);
      }
    }
    if (bench.wanted("replica_pressure")) bench.replica_pressure(store);
    if (bench.wanted("idle_timeout")) bench.idle_timeout(store);
  }
  if (bench.wanted("warm_pair_with_others")) {
    for (int others : {0, 1000, 10000}) {
      if (bench.quick() && others > 1000) continue;
      bench.warm_pair_with_others(others);
    }
  }
  if (bench.wanted("usage_sampling")) {
    bench.warm_pair_beside_usage_sampling(false, "unsampled");
    bench.warm_pair_beside_usage_sampling(true, "usage_sampled");
    bench.warm_pair_beside_usage_sampling(false, "unsampled_again");  // drift shows here
  }
  if (bench.wanted("layer_watch")) {
    bench.warm_pair_beside_layer_watch(false, "unwatched");
    bench.warm_pair_beside_layer_watch(true, "layer_watched");
    bench.warm_pair_beside_layer_watch(false, "unwatched_again");
    bench.layer_pass_with(500);
    if (!bench.quick()) bench.layer_pass_with(10000);
  }
  if (bench.wanted("shutdown")) {
    bench.shutdown_with(1000);
    if (!bench.quick()) bench.shutdown_with(10000);
  }
  if (bench.wanted("rss") && !bench.quick()) bench.rss_per_sandbox();
  bench.summary();
  return 0;
}
