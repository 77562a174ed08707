// sandboxd_engine_bench: the provider on a real engine beside the engine's own work. Each round
// alternates (so drift in the machine hits both alike):
//   provider_cold     Provider::acquire of a new conversation through local_docker, to ready
//   engine_cold       the same container made directly with the Engine API: create, start,
//                     inspect, then GET /v1/sandbox until the first 200
//   provider_reclaim  release, then acquire of the same conversation (the warm reclaim)
//   engine_inspect    one GET /containers/{id}/json
//   provider_reclaim_again
//                     a second release and reclaim right after the first (timed: the acquire)
//   backend_is_alive, engine_inspect_provider_container
//                     the plugin's liveness check of the reclaimed container, and the same
//                     container inspected directly (where a reclaim's time goes)
//   provider_resume   release, pause pass, then acquire of the same conversation
//                     (the thaw, the liveness check and the hand-out: path resumed)
//   engine_unpause_inspect
//                     the engine alone: one POST /containers/{id}/unpause of a paused
//                     container and one inspect, which is what a resume must cost
//   replica_pressure  with replicas = 1 and one warm sandbox, acquire of a new conversation
//                     (the eviction's stop and the create)
//   engine_stop       one POST /containers/{id}/stop?t=2
//   engine_cold_beside_stop
//                     the engine alone doing what replica pressure asks of it: one stop
//                     and one create-to-ready side by side, until both are done
//   provider_claimed  with warm_slots, acquire of a new conversation given a ready
//                     pre-started slot (its DeerFlow mounts bound, renamed: path claimed)
//   provider_cold_beside_slots
//                     acquire of a new conversation created cold by the same kind of
//                     provider (same image, same per-conversation mounts), in the same rounds
// then the slots' hit rate with one new conversation every --slot-arrival-seconds (2) and
// warm_slots 2, and with a burst faster than refill (misses counted by reason),
// and prints median and p90 of each with the ratios BENCHMARKS.md tracks. With
// --paused-sandboxes N it then releases N sandboxes, each left with one busy process
// (a background job), and reads the CPU their containers' cgroups used over --paused-seconds S
// (60) while warm, then over S again once paused: the figure the paused tier is for.
//
//   sandboxd_engine_bench --socket unix:///path [--image IMAGE] [--rounds N] [--jsonl FILE]
//                         [--paused-sandboxes N [--paused-seconds S]]
//                         [--slot-arrival-seconds S] [--only isolation|slots]
//                         [--base-dir DIR] [--disk-limit SIZE]
// and cold acquires without isolation, with each sandbox's bridge port isolated,
// and in `isolated` mode, and a 64 MiB download and a small GET directly and through the relay.
#include <curl/curl.h>
#include <rapidjson/document.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "quiet_logger.hpp"
#include "sandboxd/clock.hpp"
#include "sandboxd/core/paths.hpp"
#include "sandboxd/core/plugin_loader.hpp"
#include "sandboxd/core/provider.hpp"
#include "sandboxd/core/relay.hpp"
#include "sandboxd/core/thread_storage.hpp"
#include "sandboxd/sdk.hpp"

namespace {

using namespace sandboxd;
using namespace sandboxd::core;
using sandboxd::bench::QuietLogger;
using Steady = std::chrono::steady_clock;

double micros_since(Steady::time_point start) {
  return std::chrono::duration<double, std::micro>(Steady::now() - start).count();
}

size_t append(char* data, size_t size, size_t count, void* target) {
  static_cast<std::string*>(target)->append(data, size * count);
  return size * count;
}

struct Answer {
  long status = 0;
  std::string body;
};

// One HTTP call; `socket` empty: plain TCP (the sandbox's own API).
Answer call(const std::string& socket, const std::string& method, const std::string& url,
            const std::string& body = "", double timeout = 30.0) {
  CURL* curl = curl_easy_init();
  Answer answer;
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  if (!socket.empty()) curl_easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, socket.c_str());
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  if (method == "POST") curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout * 1000));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, append);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &answer.body);
  if (curl_easy_perform(curl) == CURLE_OK) {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &answer.status);
  }
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return answer;
}

struct Options {
  std::string socket;  // a unix socket path
  std::string image = "localhost/sandboxd-test-sandbox:latest";
  int rounds = 10;
  std::string jsonl;
  int paused_sandboxes = 0;  // 0: the paused-CPU figure is not measured
  double paused_seconds = 60;
  double slot_arrival_seconds = 2;
  std::string only;      // --only isolation|slots: that part alone
  std::string base_dir;  // --base-dir: where the providers' state goes (default: a temp dir)
  std::uint64_t disk_limit = 0;  // --disk-limit: each conversation's storage bound (0: none)
};

// CPU time (ns) the cgroup of process `pid` has used, from its cpu accounting: cgroup v1's
// cpuacct.usage or v2's cpu.stat usage_usec, found through /proc/PID/cgroup.
std::uint64_t cgroup_cpu_ns(long pid) {
  std::ifstream memberships("/proc/" + std::to_string(pid) + "/cgroup");
  std::string line;
  while (std::getline(memberships, line)) {
    const auto first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (controllers.find("cpuacct") != std::string::npos) {
      for (const std::string mount : {"/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/cpu,cpuacct"}) {
        std::ifstream usage(mount + path + "/cpuacct.usage");
        std::uint64_t ns = 0;
        if (usage >> ns) return ns;
      }
    } else if (controllers.empty()) {
      std::ifstream stat("/sys/fs/cgroup" + path + "/cpu.stat");
      std::string key;
      std::uint64_t value = 0;
      while (stat >> key >> value) {
        if (key == "usage_usec") return value * 1000;
      }
    }
  }
  throw std::runtime_error("no cgroup CPU accounting found for pid " + std::to_string(pid) +
                           " (read /proc/" + std::to_string(pid) + "/cgroup)");
}

class EngineBench {
 public:
  explicit EngineBench(Options options) : options_(std::move(options)) {
    if (!options_.jsonl.empty()) jsonl_.open(options_.jsonl);
    prefix_ = "sbxbench" + std::to_string(::getpid());
    base_ = (options_.base_dir.empty() ? std::filesystem::temp_directory_path()
                                       : std::filesystem::path(options_.base_dir)) /
            prefix_;
    std::filesystem::create_directories(base_);
  }
  ~EngineBench() {
    std::error_code ignored;
    std::filesystem::remove_all(base_, ignored);
  }

  std::unique_ptr<Provider> provider(int replicas, const std::string& name,
                                     double pause_after_seconds = 0, int warm_slots = 0,
                                     const std::string& network_json = "") {
    const std::filesystem::path dir = base_ / name;
    std::filesystem::create_directories(dir);
    auto logger = std::make_shared<QuietLogger>();
    auto clock = std::make_shared<SystemClock>();
    const PluginLoader loader({SANDBOXD_BENCH_PLUGIN_DIR});
    PluginContext backend;
    backend.config_key_path = "sandbox.backend";
    backend.config_json =
        R"({"socket": "unix://)" + options_.socket + R"(", "image": ")" + options_.image +
        R"(", "container_prefix": ")" + prefix_ + name +
        R"(", "sandbox_host": "127.0.0.1", "stop_timeout_seconds": 2)" +
        (warm_slots > 0 ? ", \"warm_slots\": " + std::to_string(warm_slots) +
                              ", \"slots_dir\": \"" + (dir / "slots").string() + "\""
                        : std::string()) +
        (network_json.empty() ? std::string() : ", \"network\": " + network_json) + "}";
    if (warm_slots > 0) std::filesystem::create_directories(dir / "slots");
    backend.logger = logger;
    backend.clock = clock;
    PluginContext store = backend;
    store.config_key_path = "sandbox.ownership";
    store.config_json = "{}";
    store.owner_id = "engine-bench:" + name;
    store.base_dir = dir.string();
    ProviderDeps deps;
    deps.backend = loader.load_backend("local_docker:LocalContainerBackend", backend, "bench");
    deps.ownership =
        loader.load_ownership_store("ownership_memory:MemoryOwnershipStore", store, "bench");
    deps.logger = logger;
    deps.clock = clock;
    Paths paths(dir, dir.string());
    if (options_.disk_limit > 0) {
      auto storage = ThreadStorage::for_base_dir(dir, options_.disk_limit, "--disk-limit");
      if (!storage->bounded()) throw std::runtime_error(storage->description());
      paths.set_storage(std::move(storage));
    }
    deps.paths = std::make_shared<const Paths>(std::move(paths));
    deps.options.replicas = replicas;
    deps.options.idle_timeout = 0;
    deps.options.pause_after_seconds = pause_after_seconds;
    deps.options.run_background_threads = false;
    deps.options.reconcile_on_start = false;
    auto out = std::make_unique<Provider>(std::move(deps));
    out->start();
    return out;
  }

  // create → start → inspect (port) → first 200 on /v1/sandbox; returns the container id.
  std::string engine_cold(const std::string& suffix, double& ready_us) {
    const auto t0 = Steady::now();
    const std::string name = prefix_ + suffix;
    const std::string spec =
        R"({"Image": ")" + options_.image +
        R"(", "ExposedPorts": {"8080/tcp": {}}, "HostConfig": {"Init": true, "AutoRemove": true,)"
        R"( "PortBindings": {"8080/tcp": [{"HostIp": "127.0.0.1", "HostPort": ""}]}}})";
    Answer created = call(options_.socket, "POST", "http://d/containers/create?name=" + name, spec);
    if (created.status != 201) throw std::runtime_error("create: " + created.body);
    rapidjson::Document doc;
    doc.Parse(created.body.c_str());
    const std::string id = doc["Id"].GetString();
    Answer started = call(options_.socket, "POST", "http://d/containers/" + id + "/start");
    if (started.status != 204) throw std::runtime_error("start: " + started.body);
    Answer inspected = call(options_.socket, "GET", "http://d/containers/" + id + "/json");
    doc.Parse(inspected.body.c_str());
    const std::string port = doc["NetworkSettings"]["Ports"]["8080/tcp"][0]["HostPort"].GetString();
    const std::string url = "http://127.0.0.1:" + port + "/v1/sandbox";
    while (call("", "GET", url, "", 1.0).status != 200) {
      if (micros_since(t0) > 60e6) throw std::runtime_error("not ready in 60 s");
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ready_us = micros_since(t0);
    return id;
  }

  void run() {
    auto p = provider(1000, "a");
    for (int round = 0; round < options_.rounds; ++round) {
      auto t0 = Steady::now();
      const std::string thread = "round-" + std::to_string(round);
      const std::string id = p->acquire(thread, "bench-user");
      note("provider_cold", round, micros_since(t0));

      double ready_us = 0;
      const std::string raw = engine_cold("raw-" + std::to_string(round), ready_us);
      note("engine_cold", round, ready_us);

      auto reclaim = [&] {
        p->release(id);
        auto start = Steady::now();
        p->acquire(thread, "bench-user");
        note("provider_reclaim", round, micros_since(start));
        // The same again at once: the first reclaim is the plugin's first request after the
        // bench's own work, and pays for that (caches, the plugin's request path).
        p->release(id);
        start = Steady::now();
        p->acquire(thread, "bench-user");
        note("provider_reclaim_again", round, micros_since(start));
      };
      auto inspect = [&] {
        const auto start = Steady::now();
        call(options_.socket, "GET", "http://d/containers/" + raw + "/json");
        note("engine_inspect", round, micros_since(start));
      };
      // Which of the two comes first alternates: the first one runs while the engine is still
      // settling the container it has just started, and always giving that to the reclaim
      // made the reclaim look slower than it is.
      if (round % 2 == 0) {
        reclaim();
        inspect();
      } else {
        inspect();
        reclaim();
      }
      // Where a reclaim's time goes: the plugin's liveness check of the provider's own
      // container, and the same inspect of that container made directly.
      if (const auto tracked = p->find(id)) {
        auto start = Steady::now();
        p->backend()->is_alive(tracked->info);
        note("backend_is_alive", round, micros_since(start));
        start = Steady::now();
        call(options_.socket, "GET",
             "http://d/containers/" + *tracked->info.container_name + "/json");
        note("engine_inspect_provider_container", round, micros_since(start));
      }

      t0 = Steady::now();
      call(options_.socket, "POST", "http://d/containers/" + raw + "/stop?t=2", "", 60.0);
      note("engine_stop", round, micros_since(t0));
      p->destroy(id);

      double victim_ready_us = 0;
      const std::string victim = engine_cold("victim-" + std::to_string(round), victim_ready_us);
      t0 = Steady::now();
      std::thread stopper([&] {
        call(options_.socket, "POST", "http://d/containers/" + victim + "/stop?t=2", "", 60.0);
      });
      double beside_ready_us = 0;
      const std::string made = engine_cold("beside-" + std::to_string(round), beside_ready_us);
      stopper.join();
      note("engine_cold_beside_stop", round, micros_since(t0));
      call(options_.socket, "POST", "http://d/containers/" + made + "/stop?t=2", "", 60.0);
    }
    p->shutdown();

    // The paused tier: a released sandbox paused by a pause pass, then resumed by an acquire;
    // beside it the engine alone unpausing a paused container and inspecting it.
    auto r = provider(1000, "p", /*pause_after_seconds=*/0.001);
    double ready_us = 0;
    const std::string frozen = engine_cold("frozen", ready_us);
    for (int round = 0; round < options_.rounds; ++round) {
      const std::string thread = "resume";
      const std::string id = r->acquire(thread, "bench-user");
      r->release(id);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (r->pause_idle_warm() < 1) throw std::runtime_error("the pause pass paused nothing");
      auto start = Steady::now();
      const AcquireResult resumed = r->acquire_traced(thread, "bench-user");
      if (resumed.path != AcquirePath::resumed) throw std::runtime_error("not resumed");
      note("provider_resume", round, micros_since(start));

      call(options_.socket, "POST", "http://d/containers/" + frozen + "/pause");
      start = Steady::now();
      call(options_.socket, "POST", "http://d/containers/" + frozen + "/unpause");
      call(options_.socket, "GET", "http://d/containers/" + frozen + "/json");
      note("engine_unpause_inspect", round, micros_since(start));
      r->release(id);
    }
    call(options_.socket, "POST", "http://d/containers/" + frozen + "/stop?t=2", "", 60.0);
    r->shutdown();

    // replicas = 1: each new conversation evicts the one released before it.
    auto q = provider(1, "b");
    q->release(q->acquire("pressure-warm", "bench-user"));
    for (int round = 0; round < options_.rounds; ++round) {
      const auto t0 = Steady::now();
      const std::string id = q->acquire("pressure-" + std::to_string(round), "bench-user");
      note("replica_pressure", round, micros_since(t0));
      q->release(id);
    }
    q->shutdown();
  }

  // A new conversation's first sandbox from a ready slot, beside the same created
  // cold; each measured acquire runs with the engine otherwise idle (the pool refilled).
  void slots() {
    auto s = provider(1000, "s", 0, /*warm_slots=*/1);
    auto c = provider(1000, "c");
    auto* pool = backend_capability<PreStartedSlots>(*s->backend());
    if (pool == nullptr) throw std::runtime_error("local_docker offers no PreStartedSlots");
    pool->start_slots();
    s->destroy(s->acquire("teach", "bench-user"));  // the pool learns the mount points
    const auto wait_ready = [&](std::size_t want) {
      const auto start = Steady::now();
      while (pool->slot_status().ready < want) {
        if (!pool->slot_status().off_reason.empty()) {
          throw std::runtime_error("slots are off: " + pool->slot_status().off_reason);
        }
        if (micros_since(start) > 120e6) throw std::runtime_error("no slot ready in 120 s");
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    };
    for (int round = 0; round < options_.rounds; ++round) {
      const auto claimed = [&] {
        wait_ready(1);
        const auto start = Steady::now();
        const AcquireResult got = s->acquire_traced("slot-" + std::to_string(round), "bench-user");
        note("provider_claimed", round, micros_since(start));
        if (got.path != AcquirePath::claimed) throw std::runtime_error("not claimed");
        s->destroy(got.sandbox_id);
        wait_ready(1);
      };
      const auto cold = [&] {
        const auto start = Steady::now();
        const std::string id = c->acquire("cold-" + std::to_string(round), "bench-user");
        note("provider_cold_beside_slots", round, micros_since(start));
        c->destroy(id);
      };
      if (round % 2 == 0) {
        claimed();
        cold();
      } else {
        cold();
        claimed();
      }
    }
    s->shutdown();
    c->shutdown();

    // Hit rate: new conversations slower than refill, then a burst faster than it.
    auto h = provider(1000, "h", 0, /*warm_slots=*/2);
    pool = backend_capability<PreStartedSlots>(*h->backend());
    pool->start_slots();
    h->destroy(h->acquire("teach", "bench-user"));
    wait_ready(2);
    const auto arrivals = [&](const std::string& label, const std::string& thread_prefix, int count,
                              double every_seconds) {
      const ProviderEventCounts before = h->event_counts();
      std::vector<std::string> ids;
      for (int i = 0; i < count; ++i) {
        ids.push_back(h->acquire(thread_prefix + std::to_string(i), "bench-user"));
        std::this_thread::sleep_for(std::chrono::duration<double>(every_seconds));
      }
      for (const auto& id : ids) h->destroy(id);
      const ProviderEventCounts after = h->event_counts();
      std::string misses;
      for (const auto miss : kSlotMissReasons) {
        const auto i = static_cast<std::size_t>(miss);
        const auto n = after.slot_misses[i] - before.slot_misses[i];
        if (n > 0)
          misses +=
              std::string(misses.empty() ? "" : ", ") + to_string(miss) + " " + std::to_string(n);
      }
      std::printf("slot hit rate, %d new conversations %s, warm_slots 2: %llu/%d claimed%s\n",
                  count, label.c_str(),
                  static_cast<unsigned long long>(after.slot_claims - before.slot_claims), count,
                  misses.empty() ? "" : ("; misses: " + misses).c_str());
    };
    char every[64];
    std::snprintf(every, sizeof every, "one every %.1f s", options_.slot_arrival_seconds);
    arrivals(every, "paced-", options_.rounds, options_.slot_arrival_seconds);
    wait_ready(2);
    arrivals("at once", "burst-", 5, 0);
    h->shutdown();
  }

  // What N released sandboxes cost in CPU over `paused_seconds`, warm then paused.
  void paused_cpu() {
    const int n = options_.paused_sandboxes;
    auto provider_for_cpu = provider(1000, "cpu", /*pause_after_seconds=*/0.001);
    std::vector<std::string> ids;
    for (int i = 0; i < n; ++i)
      ids.push_back(provider_for_cpu->acquire("cpu-" + std::to_string(i), "bench-user"));
    for (const auto& id : ids) provider_for_cpu->release(id);
    // The containers' init processes, by the engine (the sandboxes' containers carry the prefix).
    std::vector<long> pids;
    const Answer listed =
        call(options_.socket, "GET",
             "http://d/containers/json?filters=%7B%22name%22%3A%5B%22" + prefix_ + "cpu%22%5D%7D");
    rapidjson::Document doc;
    doc.Parse(listed.body.c_str());
    if (!doc.IsArray()) throw std::runtime_error("container listing: " + listed.body);
    for (const auto& container : doc.GetArray()) {
      const Answer inspected =
          call(options_.socket, "GET",
               std::string("http://d/containers/") + container["Id"].GetString() + "/json");
      rapidjson::Document state;
      state.Parse(inspected.body.c_str());
      pids.push_back(state["State"]["Pid"].GetInt64());
    }
    if (static_cast<int>(pids.size()) != n) {
      throw std::runtime_error("expected " + std::to_string(n) + " containers, the engine lists " +
                               std::to_string(pids.size()));
    }
    // Each sandbox keeps a process busy after its release (a background job the conversation
    // left running): what a warm sandbox costs, and what pausing it saves.
    for (const auto& container : doc.GetArray()) {
      const Answer exec =
          call(options_.socket, "POST",
               std::string("http://d/containers/") + container["Id"].GetString() + "/exec",
               R"({"Cmd": ["sh", "-c", "while :; do :; done"]})");
      rapidjson::Document made;
      made.Parse(exec.body.c_str());
      if (exec.status != 201 || !made.IsObject() || !made.HasMember("Id")) {
        throw std::runtime_error("exec create: " + exec.body);
      }
      const Answer started = call(options_.socket, "POST",
                                  std::string("http://d/exec/") + made["Id"].GetString() + "/start",
                                  R"({"Detach": true})");
      if (started.status != 200) throw std::runtime_error("exec start: " + started.body);
    }
    const auto used_over = [&](double seconds) {
      std::uint64_t before = 0, after = 0;
      for (const long pid : pids) before += cgroup_cpu_ns(pid);
      std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
      for (const long pid : pids) after += cgroup_cpu_ns(pid);
      return static_cast<double>(after - before) / 1e6;  // ms
    };
    std::fprintf(stderr,
                 "paused CPU: %d sandboxes, each with one busy process, warm for %.0f s, then "
                 "paused for %.0f s\n",
                 n, options_.paused_seconds, options_.paused_seconds);
    const double warm_ms = used_over(options_.paused_seconds);
    // A pause may fail under this load (busy processes on every core slow the freezer past
    // the engine's answer): each pass retries what is still warm.
    int paused = 0;
    for (int pass = 0; pass < 10 && paused < n; ++pass) {
      paused += provider_for_cpu->pause_idle_warm();
    }
    if (paused != n) {
      throw std::runtime_error("only " + std::to_string(paused) + " of " + std::to_string(n) +
                               " sandboxes paused in 10 passes");
    }
    const double paused_ms = used_over(options_.paused_seconds);
    provider_for_cpu->shutdown();
    std::printf(
        "CPU of %d released sandboxes, one busy process each, over %.0f s (cgroup "
        "accounting): warm %.1f ms, paused %.1f ms\n",
        n, options_.paused_seconds, warm_ms, paused_ms);
  }

  // Issue 33. Cold acquires of new conversations by three providers, round by round: no
  // isolation (the engine's default bridge), open mode with each sandbox's bridge port isolated
  // (the default), and `isolated` mode (no network; readiness through its namespace). Then a
  // 64 MiB file served by the sandbox's own httpd, fetched directly through its published port
  // and through the relay from an `isolated` sandbox, and small requests each way (a new
  // connection each).
  void isolation() {
    auto plain = provider(1000, "n0", 0, 0, R"({"isolate_sandboxes": false})");
    auto ported = provider(1000, "n1");
    auto isolated = provider(1000, "n2", 0, 0, R"({"mode": "isolated"})");
    const std::pair<const char*, Provider*> kinds[] = {{"cold_unisolated", plain.get()},
                                                       {"cold_port_isolated", ported.get()},
                                                       {"cold_isolated_mode", isolated.get()}};
    // One resident conversation each: a fleet is rarely empty, and the first sandbox of an empty
    // one also makes the shared network (its cost is the first row, network_first_sandbox).
    {
      const auto t0 = Steady::now();
      ported->acquire("resident", "bench-user");
      note("network_first_sandbox", 0, micros_since(t0));
      plain->acquire("resident", "bench-user");
      isolated->acquire("resident", "bench-user");
    }
    for (int round = 0; round < options_.rounds; ++round) {
      for (int k = 0; k < 3; ++k) {
        const auto& [scenario, p] = kinds[(k + round) % 3];  // the order rotates
        const auto t0 = Steady::now();
        const std::string id = p->acquire("iso-" + std::to_string(round), "bench-user");
        note(scenario, round, micros_since(t0));
        p->destroy(id);
      }
    }
    // A reuse of an active sandbox, now checked before it is handed out (its port's
    // flag read back from sysfs: no engine round trip), beside the same reuse where there is no
    // port to keep (isolation off).
    for (int round = 0; round < options_.rounds; ++round) {
      for (int i = 0; i < 100; ++i) {
        for (const auto& [scenario, p] : {std::pair{"reuse_unisolated", plain.get()},
                                          std::pair{"reuse_port_isolated", ported.get()}}) {
          const auto t0 = Steady::now();
          p->acquire("resident", "bench-user");
          note(scenario, round, micros_since(t0));
        }
      }
    }
    // The download: the same file in an open sandbox (published port) and an isolated one.
    const std::string direct_id = ported->acquire("download", "bench-user");
    const std::string relayed_id = isolated->acquire("download", "bench-user");
    RelayOptions relay_options;
    Relay relay(*isolated, RelayTokens(std::string(32, 'b')), relay_options,
                std::make_shared<QuietLogger>());
    relay.start();
    const auto direct_info = ported->find(direct_id)->info;
    const auto relayed_info = isolated->find(relayed_id)->info;
    for (const auto* info : {&direct_info, &relayed_info}) {
      exec(*info->container_id, R"(["dd","if=/dev/zero","of=/www/big","bs=1048576","count=64"])");
    }
    const std::string direct_url = direct_info.sandbox_url;
    const std::string relay_url = relay.url_for(relayed_id);
    const std::string token =
        std::string(kRelayTokenHeader) + ": " + relay.headers_for(relayed_info).begin()->second;
    for (int round = 0; round < options_.rounds; ++round) {
      note("download_64mib_direct", round, timed_get(direct_url + "/big", "", 64u << 20));
      note("download_64mib_relay", round, timed_get(relay_url + "/big", token, 64u << 20));
      for (int i = 0; i < 20; ++i) {
        note("small_get_direct", round, timed_get(direct_url + "/v1/sandbox", "", 0));
        note("small_get_relay", round, timed_get(relay_url + "/v1/sandbox", token, 0));
      }
    }
    relay.stop();
    ported->destroy(direct_id);
    isolated->destroy(relayed_id);
    plain->shutdown();
    ported->shutdown();
    isolated->shutdown();
  }

  void summary() {
    std::printf("%-18s %6s %12s %12s\n", "scenario", "n", "median_ms", "p90_ms");
    std::map<std::string, std::pair<double, double>> figures;
    for (auto& [scenario, values] : samples_) {
      std::sort(values.begin(), values.end());
      const double median = values[values.size() / 2] / 1000.0;
      const double p90 = values[std::min(values.size() - 1, values.size() * 9 / 10)] / 1000.0;
      figures[scenario] = {median, p90};
      std::printf("%-18s %6zu %12.2f %12.2f\n", scenario.c_str(), values.size(), median, p90);
    }
    auto ratio = [&](const char* label, const std::string& a, const std::string& b, bool p90) {
      const double x = p90 ? figures[a].second : figures[a].first;
      const double y = p90 ? figures[b].second : figures[b].first;
      std::printf("%-58s %6.2f\n", label, y > 0 ? x / y : 0.0);
    };
    ratio("cold acquire / engine create-to-ready, median", "provider_cold", "engine_cold", false);
    ratio("cold acquire / engine create-to-ready, p90", "provider_cold", "engine_cold", true);
    ratio("warm reclaim / one inspect, median", "provider_reclaim", "engine_inspect", false);
    ratio("warm reclaim right after another / one inspect, median", "provider_reclaim_again",
          "engine_inspect", false);
    ratio("resume of a paused sandbox / (one unpause + one inspect), median", "provider_resume",
          "engine_unpause_inspect", false);
    const double longer = std::max(figures["provider_cold"].first, figures["engine_stop"].first);
    std::printf("%-58s %6.2f\n", "replica_pressure / longer of cold acquire and one stop",
                longer > 0 ? figures["replica_pressure"].first / longer : 0.0);
    ratio("replica_pressure / engine stop beside create-to-ready", "replica_pressure",
          "engine_cold_beside_stop", false);
    ratio("engine stop beside create-to-ready / engine create-to-ready", "engine_cold_beside_stop",
          "engine_cold", false);
    ratio("new conversation from a ready slot / created cold, median", "provider_claimed",
          "provider_cold_beside_slots", false);
    if (figures.count("cold_unisolated") != 0) {
      ratio("cold acquire, ports isolated / not isolated, median", "cold_port_isolated",
            "cold_unisolated", false);
      ratio("cold acquire, isolated mode / not isolated, median", "cold_isolated_mode",
            "cold_unisolated", false);
      ratio("64 MiB download, direct time / relay time, median (throughput ratio)",
            "download_64mib_direct", "download_64mib_relay", false);
    }
  }

 private:
  // Runs `command_json` (an exec Cmd array) in the container and waits for it.
  void exec(const std::string& container, const std::string& command_json) {
    Answer made = call(options_.socket, "POST", "http://d/containers/" + container + "/exec",
                       R"({"Cmd": )" + command_json + R"(, "AttachStdout": true})");
    if (made.status != 201) throw std::runtime_error("exec create: " + made.body);
    rapidjson::Document doc;
    doc.Parse(made.body.c_str());
    const std::string id = doc["Id"].GetString();
    Answer started = call(options_.socket, "POST", "http://d/exec/" + id + "/start",
                          R"({"Detach": false, "Tty": false})", 120.0);
    if (started.status != 200) throw std::runtime_error("exec start: " + started.body);
  }

  // A GET on a new connection; µs to the last byte. `expect_bytes` 0: any size.
  static double timed_get(const std::string& url, const std::string& header,
                          std::size_t expect_bytes) {
    CURL* curl = curl_easy_init();
    curl_slist* headers = header.empty() ? nullptr : curl_slist_append(nullptr, header.c_str());
    std::size_t got = 0;
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    if (headers) curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 60000L);
    curl_easy_setopt(
        curl, CURLOPT_WRITEFUNCTION, +[](char*, size_t size, size_t count, void* total) {
          *static_cast<std::size_t*>(total) += size * count;
          return size * count;
        });
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &got);
    const auto t0 = Steady::now();
    const CURLcode done = curl_easy_perform(curl);
    const double us = micros_since(t0);
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    if (done != CURLE_OK || status != 200 || (expect_bytes != 0 && got != expect_bytes)) {
      throw std::runtime_error("GET " + url + ": HTTP " + std::to_string(status) + ", " +
                               std::to_string(got) + " bytes");
    }
    return us;
  }

  void note(const std::string& scenario, int round, double us) {
    samples_[scenario].push_back(us);
    if (jsonl_) {
      jsonl_ << "{\"scenario\":\"" << scenario << "\",\"backend\":\"local_docker\",\"store\":"
             << "\"memory\",\"concurrency\":1,\"iteration\":" << round << ",\"acquire_us\":" << us
             << ",\"success\":true,\"error\":null}\n";
    }
  }

  Options options_;
  std::string prefix_;
  std::filesystem::path base_;
  std::ofstream jsonl_;
  std::map<std::string, std::vector<double>> samples_;
};

}  // namespace

int main(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--socket" && has_value) {
      options.socket = argv[++i];
      if (options.socket.rfind("unix://", 0) == 0) options.socket.erase(0, 7);
    } else if (arg == "--image" && has_value) {
      options.image = argv[++i];
    } else if (arg == "--rounds" && has_value) {
      options.rounds = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--jsonl" && has_value) {
      options.jsonl = argv[++i];
    } else if (arg == "--paused-sandboxes" && has_value) {
      options.paused_sandboxes = std::max(0, std::atoi(argv[++i]));
    } else if (arg == "--paused-seconds" && has_value) {
      options.paused_seconds = std::max(1.0, std::atof(argv[++i]));
    } else if (arg == "--only" && has_value) {
      options.only = argv[++i];
      if (options.only != "isolation" && options.only != "slots") {
        std::fprintf(stderr, "sandboxd_engine_bench: --only takes isolation or slots\n");
        return 2;
      }
    } else if (arg == "--slot-arrival-seconds" && has_value) {
      options.slot_arrival_seconds = std::max(0.0, std::atof(argv[++i]));
    } else if (arg == "--base-dir" && has_value) {
      options.base_dir = argv[++i];
    } else if (arg == "--disk-limit" && has_value) {
      const auto bytes = sandboxd::core::parse_size(argv[++i]);
      if (!bytes) {
        std::fprintf(stderr, "sandboxd_engine_bench: --disk-limit: not a size: '%s'\n", argv[i]);
        return 2;
      }
      options.disk_limit = *bytes;
    } else {
      std::fprintf(
          stderr,
          "Usage: sandboxd_engine_bench --socket unix:///PATH [--image IMAGE] "
          "[--rounds N] [--jsonl FILE]\n"
          "                             [--paused-sandboxes N [--paused-seconds S]]\n"
          "                             [--slot-arrival-seconds S] [--only isolation|slots]\n"
          "                             [--base-dir DIR] [--disk-limit SIZE]\n"
          "  --paused-sandboxes N  also the CPU N released sandboxes use over S s "
          "warm, then paused (cgroup)\n"
          "  --paused-seconds S    how long each of those two readings lasts "
          "(default 60)\n"
          "  --slot-arrival-seconds S\n"
          "                        pause between new conversations in the slots' "
          "hit-rate reading (default 2)\n"
          "  --only isolation|slots\n"
          "                        only the network isolation and relay figures, or only\n"
          "                        the pre-started slots' ones\n"
          "  --base-dir DIR        the providers' state directories go under DIR\n"
          "                        (default: the temp directory)\n"
          "  --disk-limit SIZE     each conversation's storage bounded (\"10g\"); DIR must\n"
          "                        be on a filesystem that bounds it (btrfs, root)\n");
      return arg == "--help" || arg == "-h" ? 0 : 2;
    }
  }
  if (options.socket.empty()) {
    std::fprintf(stderr, "sandboxd_engine_bench: --socket is required (see --help)\n");
    return 2;
  }
  curl_global_init(CURL_GLOBAL_DEFAULT);
  try {
    EngineBench bench(options);
    if (options.only.empty()) bench.run();
    if (options.only.empty() || options.only == "isolation") bench.isolation();
    if (options.only.empty() || options.only == "slots") bench.slots();
    bench.summary();
    if (options.paused_sandboxes > 0) bench.paused_cpu();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "sandboxd_engine_bench: %s\n", error.what());
    return 1;
  }
  return 0;
}
