#include "commands.hpp"

#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "cli_error.hpp"
#include "sandboxd/capabilities.hpp"
#include "sandboxd/core/config.hpp"
#include "sandboxd/core/configured_plugins.hpp"
#include "sandboxd/core/owner_id.hpp"
#include "sandboxd/core/paths.hpp"
#include "sandboxd/core/plugin_loader.hpp"
#include "sandboxd/core/sandbox_id.hpp"
#include "sandboxd/core/service_json.hpp"
#include "sandboxd/json.hpp"
#include "sandboxd/readiness.hpp"
#include "session.hpp"

namespace po = boost::program_options;

namespace sandboxctl {

using namespace sandboxd;

// ── shared plumbing ──────────────────────────────────────────────────────────

// Parses a subcommand's arguments; --help prints usage, options and details, then HelpShown.
po::variables_map parse_args(const CommandHelp& help, po::options_description& options,
                             const std::vector<std::string>& args,
                             const po::positional_options_description* positional) {
  options.add_options()("json", "print one JSON document on stdout")("help,h", "show this help");
  po::variables_map vm;
  po::command_line_parser parser(args);
  parser.options(options);
  po::positional_options_description none;
  parser.positional(positional ? *positional : none);
  po::store(parser.run(), vm);
  if (vm.count("help")) {
    std::cout << "Usage: " << help.usage << "\n\n" << options << "\n" << help.details;
    throw HelpShown{};
  }
  po::notify(vm);
  return vm;
}

bool json_output(const GlobalContext& context, const po::variables_map& vm) {
  return context.json || vm.count("json") > 0;
}

void emit(const rapidjson::StringBuffer& buffer) {
  std::cout << buffer.GetString() << "\n";
}

namespace {

std::string seconds_text(double seconds) {
  char buffer[32];
  if (seconds < 0) seconds = 0;
  if (seconds < 120) {
    std::snprintf(buffer, sizeof buffer, "%.0fs", seconds);
  } else if (seconds < 7200) {
    std::snprintf(buffer, sizeof buffer, "%.0fm", seconds / 60);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.1fh", seconds / 3600);
  }
  return buffer;
}

// ── plugins ──────────────────────────────────────────────────────────────────

int cmd_plugins(GlobalContext& context, const std::vector<std::string>& args) {
  const CommandHelp help{
      "sandboxctl [--config FILE] plugins [--json]",
      "Lists every plugin class found on the plugin path, one per line:\n"
      "  module:Class  kind  abi=N  version=V  path\n"
      "V is the plugin's own version (sandboxd_add_plugin's VERSION, by default its project's;\n"
      "\"unknown\" for a plugin built before versions were recorded).\n"
      "The path is the config's plugin_dirs (with --config), then SANDBOXD_PLUGIN_PATH, the\n"
      "install directory, then the build tree. Exit 1 when no plugin is found.\n\n"
      "Example:\n  sandboxctl plugins --json\n"};
  po::options_description options("Options");
  const auto vm = parse_args(help, options, args);
  std::optional<core::SandboxConfig> config;
  if (context.config_file) config = core::load_config_file(*context.config_file);
  const core::PluginLoader loader(config ? config->plugin_dirs : std::vector<std::string>{});
  const auto classes = loader.list();
  if (json_output(context, vm)) {
    rapidjson::StringBuffer buffer;
    JsonWriter w(buffer);
    w.StartObject();
    w.Key("search_path");
    w.StartArray();
    for (const auto& dir : loader.search_path()) w.String(dir.c_str());
    w.EndArray();
    w.Key("plugins");
    w.StartArray();
    for (const auto& c : classes) {
      w.StartObject();
      write_json_member(w, "use", c.use_string());
      write_json_member(w, "kind", c.problem.empty() ? to_string(c.kind) : "unusable");
      w.Key("abi");
      w.Uint(c.abi_version);
      write_json_member(w, "version", c.version);
      write_json_member(w, "path", c.path);
      write_json_member(w, "description", c.description);
      if (!c.problem.empty()) write_json_member(w, "problem", c.problem);
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
    emit(buffer);
    return kOk;
  }
  if (classes.empty()) {
    std::string searched;
    for (const auto& dir : loader.search_path()) searched += " " + dir;
    throw CliError(ErrorKind::internal, "no plugins found; searched:" + searched);
  }
  for (const auto& c : classes) {
    std::printf("%-45s  %-9s  abi=%u  version=%s  %s%s\n", c.use_string().c_str(),
                c.problem.empty() ? to_string(c.kind) : "unusable", c.abi_version,
                c.version.empty() ? "unknown" : c.version.c_str(), c.path.c_str(),
                c.problem.empty() ? "" : ("  (" + c.problem + ")").c_str());
    if (!c.description.empty()) std::printf("    %s\n", c.description.c_str());
  }
  return kOk;
}

// ── check-config ─────────────────────────────────────────────────────────────

// The id DeerFlow's AioSandboxProvider computed before its mount contract was versioned: a
// fleet mixing it with sandboxd shares Redis keys but not the key of one conversation.
static std::string older_deerflow_sandbox_id(const std::string& user_id,
                                             const std::string& thread_id) {
  return core::sha256_hex(user_id + ":" + thread_id).substr(0, 16);
}

int cmd_check_config(GlobalContext& context, const std::vector<std::string>& args) {
  const CommandHelp help{
      "sandboxctl [--config FILE] check-config [--user U --thread T] [--json]",
      "Loads the config (--config FILE, else the built-in default; a DeerFlow config.yaml is\n"
      "read as is) and constructs the plugins it names, which validates their own options, then\n"
      "prints the resolved settings with every secret shown as <redacted> and the mapping made\n"
      "from DeerFlow's keys. Exit 3 on any error, naming the file, line (YAML), key and value.\n"
      "With --user and --thread it also prints the sandbox id that conversation gets, and the id\n"
      "an older DeerFlow (sha256(user:thread)) would give it, to check a mixed fleet.\n\n"
      "Example:\n  sandboxctl --config /etc/sandboxd.json check-config\n"
      "  sandboxctl --config config.yaml check-config --user alice --thread t-1\n"};
  po::options_description options("Options");
  options.add_options()("user", po::value<std::string>(), "user id of a conversation to show")(
      "thread", po::value<std::string>(), "thread id of a conversation to show");
  const auto vm = parse_args(help, options, args);
  if (vm.count("user") != vm.count("thread")) {
    throw CliError(ErrorKind::invalid_argument,
                   "check-config: --user and --thread go together (the id is of a conversation)");
  }
  std::optional<std::pair<std::string, std::string>> conversation;
  if (vm.count("thread")) {
    conversation.emplace(vm["user"].as<std::string>(), vm["thread"].as<std::string>());
  }
  const core::SandboxConfig config = load_command_config(context.config_file);
  for (const auto& warning : config.warnings) context.logger->warning(warning);
  core::HostServices services;
  services.logger = context.logger;
  services.clock = std::make_shared<SystemClock>();
  services.owner_id = core::generate_owner_id();
  services.base_dir = core::resolve_base_dir(config.base_dir);
  const auto plugins = core::load_configured_plugins(config, services);  // validates options
  // Each conversation's storage bound and the free-space floor (docs/storage.md), judged
  // without changing anything.
  const auto storage = core::ThreadStorage::for_base_dir(
      services.base_dir,
      core::parse_size(config.disk_limit.value_or(core::kDefaultDiskLimit)).value_or(0),
      config.disk_limit ? "sandbox.disk_limit" : "the default", /*look_only=*/true);
  const std::string floor_shown =
      core::show_size(
          core::parse_size(config.min_free_disk.value_or(core::kDefaultMinFreeDisk)).value_or(0)) +
      " under " + services.base_dir +
      (backend_capability<EngineStorage>(*plugins.backend) ? " and the engine's storage" : "") +
      " (min_free_disk, from " + (config.min_free_disk ? "sandbox.min_free_disk" : "the default") +
      "): new sandboxes refused below it";
  const std::string layer_shown =
      storage->limit_bytes() == 0 ? std::string("not bounded (disk_limit 0)")
      : backend_capability<WritableLayerUsage>(*plugins.backend)
          ? "held to " + core::show_size(storage->limit_bytes()) +
                " by sampling its size each idle-check pass (up to 256 sandboxes a pass; "
                "the engines' own size option needs overlay on XFS with project quotas); "
                "a sandbox past it is stopped (event over_disk_limit)"
          : "not measured: backend " + config.backend.use + " cannot tell its size";
  // The optional verbs the backend offers (sandboxd/capabilities.hpp), so an operator sees
  // which features it can have before turning them on.
  std::vector<std::string> capabilities;
  if (backend_capability<MountContractNegotiation>(*plugins.backend)) {
    capabilities.emplace_back("mount_contract_negotiation");
  }
  const bool can_pause = backend_capability<SandboxPausing>(*plugins.backend) != nullptr;
  if (can_pause) capabilities.emplace_back("pause");
  if (backend_capability<SandboxUsage>(*plugins.backend)) capabilities.emplace_back("usage");
  if (backend_capability<SandboxSnapshots>(*plugins.backend)) {
    capabilities.emplace_back("snapshots");
  }
  if (backend_capability<IsolationKeeping>(*plugins.backend)) {
    capabilities.emplace_back("isolation_keeping");
  }
  if (backend_capability<WritableLayerUsage>(*plugins.backend)) {
    capabilities.emplace_back("writable_layer_usage");
  }
  // Whether slots can work here (root in the engine's mount namespace) is probed when a
  // long-lived host starts them; a reason they are off goes to its log and /metrics.
  std::optional<std::pair<std::size_t, std::string>> slots;  // configured, preflight
  if (auto* pool = backend_capability<PreStartedSlots>(*plugins.backend)) {
    capabilities.emplace_back("pre_started_slots");
    if (const std::size_t configured = pool->slot_status().configured; configured > 0) {
      slots.emplace(configured, pool->slot_preflight());
    }
  }
  std::vector<SettingsReport::Line> settings;
  if (const auto* report = backend_capability<SettingsReport>(*plugins.backend)) {
    settings = report->effective_settings();
  }
  if (config.pause_after_seconds > 0 && !can_pause) {
    context.logger->warning("sandbox.pause_after_seconds is set but backend " + config.backend.use +
                            " cannot pause sandboxes; released sandboxes stay warm until "
                            "idle_timeout");
  }
  const double ttl = plugins.ownership->ttl_seconds();
  const bool cross_process = plugins.ownership->supports_cross_process();
  plugins.ownership->close();
  const std::string rendered = core::render_redacted(config);
  // What every other sandboxctl command acts as (see session.hpp).
  const double one_shot_ttl =
      core::with_lease_ttl_at_least(config, config.idle_timeout).ttl_seconds();
  const auto registry_file = registry_path(services.base_dir);
  // check-config writes nothing in the state directory: before the first command has made
  // the installation id, there is no owner id to show yet.
  std::string one_shot_owner = core::one_shot_owner_id(registry_file, /*create=*/false);
  if (one_shot_owner.empty())
    one_shot_owner = "(made by the first command on this state directory)";
  if (json_output(context, vm)) {
    rapidjson::StringBuffer buffer;
    JsonWriter w(buffer);
    w.StartObject();
    w.Key("config");
    w.RawValue(rendered.c_str(), rendered.size(), rapidjson::kObjectType);
    write_json_member(w, "source", config.source_file);
    write_json_member(w, "backend", config.backend.use);
    write_json_member(w, "ownership", config.ownership.use);
    w.Key("lease_ttl_seconds");
    w.Double(ttl);
    w.Key("cross_process");
    w.Bool(cross_process);
    w.Key("backend_capabilities");
    w.StartArray();
    for (const auto& capability : capabilities) write_json_string(w, capability);
    w.EndArray();
    if (!settings.empty()) {
      w.Key("backend_settings");
      w.StartArray();
      for (const auto& line : settings) {
        w.StartObject();
        write_json_member(w, "setting", line.setting);
        write_json_member(w, "source", line.source);
        w.EndObject();
      }
      w.EndArray();
    }
    if (slots) {
      w.Key("pre_started_slots");
      w.StartObject();
      w.Key("warm_slots");
      w.Uint64(slots->first);
      write_json_member(w, "off_reason", slots->second);
      w.EndObject();
    }
    w.Key("storage");
    w.StartObject();
    write_json_member(w, "mechanism", storage->bounded() ? "btrfs_qgroup" : "none");
    w.Key("disk_limit_bytes");
    w.Uint64(storage->limit_bytes());
    write_json_member(w, "description", storage->description());
    write_json_member(w, "min_free_disk", floor_shown);
    write_json_member(w, "writable_layer", layer_shown);
    w.EndObject();
    write_json_member(w, "sandboxctl_registry", registry_file.string());
    write_json_member(w, "sandboxctl_owner_id", one_shot_owner);
    w.Key("sandboxctl_lease_ttl_seconds");
    w.Double(one_shot_ttl);
    if (conversation) {
      w.Key("conversation");
      w.StartObject();
      write_json_member(w, "user_id", conversation->first);
      write_json_member(w, "thread_id", conversation->second);
      write_json_member(w, "sandbox_id",
                        core::deterministic_sandbox_id(conversation->second, conversation->first));
      write_json_member(w, "older_deerflow_sandbox_id",
                        older_deerflow_sandbox_id(conversation->first, conversation->second));
      w.EndObject();
    }
    w.EndObject();
    emit(buffer);
    return kOk;
  }
  std::cout << rendered << "\n";
  std::string offered;
  for (const auto& capability : capabilities) offered += (offered.empty() ? "" : ", ") + capability;
  std::cout << "backend: " << config.backend.use
            << " loaded (optional capabilities: " << (offered.empty() ? "none" : offered) << ")\n";
  for (const auto& line : settings) {
    std::cout << "  " << line.setting << " (" << line.source << ")\n";
  }
  if (slots) {
    std::cout << "pre-started slots: warm_slots " << slots->first << ", "
              << (slots->second.empty()
                      ? std::string("nothing found against them (serve's start-up probe decides)")
                      : "off: " + slots->second)
              << "\n";
  }
  std::cout << "conversation storage: " << storage->description() << "\n";
  std::cout << "free-space floor: " << floor_shown << "\n";
  std::cout << "writable layer: " << layer_shown << "\n";
  std::cout << "ownership: " << config.ownership.use << " loaded (ttl " << ttl << "s, "
            << (cross_process ? "cross-process" : "single-process") << ")\n";
  std::cout << "sandboxctl commands: registry " << registry_file.string() << ", owner "
            << one_shot_owner << ", leases of " << one_shot_ttl << "s (at least idle_timeout)\n";
  if (conversation) {
    std::cout << "conversation (" << conversation->first << ", " << conversation->second
              << "): sandbox id "
              << core::deterministic_sandbox_id(conversation->second, conversation->first)
              << " (sha256(\"mount-v" << kSandboxMountContractVersion
              << ":{user}:{thread}\")[:16]); an older DeerFlow (sha256(\"{user}:{thread}\")[:16]) "
              << "gives " << older_deerflow_sandbox_id(conversation->first, conversation->second)
              << "\n";
  }
  return kOk;
}

// ── acquire ──────────────────────────────────────────────────────────────────

int cmd_acquire(GlobalContext& context, const std::vector<std::string>& args) {
  const CommandHelp help{
      "sandboxctl [--config FILE] acquire [--user U] [--thread T] [--from-snapshot NAME\n"
      "           [--snapshot-user V --allow-other-user]] [--json]",
      "Gets the sandbox of conversation (U, T): reuses the active one, reclaims it from the warm\n"
      "pool, discovers its running container, or creates one, then prints its id, URL and which\n"
      "of those it did (--json: {sandbox_id, sandbox_url, path}). Without --thread it creates an\n"
      "anonymous sandbox. The sandbox keeps running after this process exits; release or\n"
      "destroy it from any later sandboxctl on the same state directory.\n"
      "With --from-snapshot the conversation's sandbox is made from U's snapshot NAME (path\n"
      "restored): its current sandbox is destroyed and its directories replaced by the\n"
      "snapshot's; another user's snapshot needs --snapshot-user V --allow-other-user.\n"
      "Exit 4 when the engine fails, 6 when a peer is tearing the sandbox down.\n\n"
      "Example:\n  sandboxctl acquire --user alice --thread t-1\n"
      "  sandboxctl acquire --user alice --thread t-2 --from-snapshot before-upgrade\n"};
  po::options_description options("Options");
  options.add_options()("user,u", po::value<std::string>(),
                        "user id (letters, digits, '_', '-'); default: default")(
      "thread,t", po::value<std::string>(), "thread id (1-64 of letters, digits, '_', '-')")(
      "from-snapshot", po::value<std::string>(), "make it from this snapshot (docs/snapshots.md)")(
      "snapshot-user", po::value<std::string>(), "whose snapshot (default: the conversation's)")(
      "allow-other-user", po::bool_switch(), "allow a snapshot of another user");
  const auto vm = parse_args(help, options, args);
  std::optional<std::string> user, thread;
  if (vm.count("user")) user = vm["user"].as<std::string>();
  if (vm.count("thread")) thread = vm["thread"].as<std::string>();
  const std::string who = user.value_or("default") + "/" + thread.value_or("<anonymous>");
  auto progress = context.progress;
  core::ProviderHooks hooks;
  hooks.wait_until_ready = [progress](const std::string& url, double timeout) {
    progress->set_phase("waiting for " + url + "/v1/sandbox to answer");
    return wait_for_sandbox_ready(url, timeout);
  };
  Session session(load_command_config(context.config_file), context.logger, std::move(hooks));
  progress->start("acquiring a sandbox for " + who);
  core::AcquireRequest request{user, thread, "--user", "--thread"};
  if (vm.count("from-snapshot")) {
    core::Provider::RestoreFrom from;
    from.name = vm["from-snapshot"].as<std::string>();
    if (vm.count("snapshot-user")) from.user_id = vm["snapshot-user"].as<std::string>();
    from.allow_other_user = vm["allow-other-user"].as<bool>();
    request.from_snapshot = from;
  }
  const core::Acquired acquired = session.service().acquire(request);
  progress->stop();
  session.commit();
  if (json_output(context, vm)) {
    std::cout << core::to_json(acquired) << "\n";
  } else {
    std::cout << "sandbox_id:  " << acquired.sandbox_id << "\n"
              << "sandbox_url: " << acquired.sandbox_url << "\n"
              << "path:        " << core::to_string(acquired.path) << "\n";
  }
  return kOk;
}

// ── release / destroy / get ──────────────────────────────────────────────────

po::positional_options_description id_positional() {
  po::positional_options_description positional;
  positional.add("sandbox-id", 1);
  return positional;
}

std::string required_id(const po::variables_map& vm, const char* command) {
  if (!vm.count("sandbox-id")) {
    throw CliError(ErrorKind::invalid_argument, std::string(command) +
                                                    " needs a sandbox id (sandboxctl " + command +
                                                    " ID; sandboxctl list shows them)");
  }
  return vm["sandbox-id"].as<std::string>();
}

// One sandbox as text: its view, then the result of what was done ("" for a get).
void print_one(const core::SandboxView& t, const std::string& result) {
  const std::string conversation = t.thread_id ? t.user_id.value_or("") + "/" + *t.thread_id : "-";
  std::cout << "sandbox_id:   " << t.sandbox_id << "\n"
            << "sandbox_url:  " << t.sandbox_url << "\n"
            << "state:        " << core::to_string(t.state) << "\n"
            << "conversation: " << conversation << "\n"
            << (core::is_released(t.state) ? "released:     " : "last used:    ")
            << seconds_text(core::wall_clock_now() - t.since) << " ago\n";
  if (!result.empty()) std::cout << "result:       " << result << "\n";
}

int cmd_release(GlobalContext& context, const std::vector<std::string>& args) {
  const CommandHelp help{
      "sandboxctl [--config FILE] release ID [--json]",
      "Parks the sandbox in the warm pool: it keeps running, and the next acquire of its\n"
      "conversation reclaims it. Exit 5 when ID is not tracked here; exit 6 when its lease now\n"
      "belongs to another instance (it is then no longer tracked here, and keeps running).\n\n"
      "Example:\n  sandboxctl release 0123456789abcdef\n"};
  po::options_description options("Options");
  options.add_options()("sandbox-id", po::value<std::string>(), "the sandbox to release");
  const auto positional = id_positional();
  const auto vm = parse_args(help, options, args, &positional);
  const std::string id = required_id(vm, "release");
  Session session(load_command_config(context.config_file), context.logger);
  const core::Released released = session.service().release(id);
  session.commit();
  if (json_output(context, vm)) {
    std::cout << core::to_json(released) << "\n";
  } else {
    print_one(released.sandbox, released.result);
  }
  return kOk;
}

int cmd_destroy(GlobalContext& context, const std::vector<std::string>& args) {
  const CommandHelp help{
      "sandboxctl [--config FILE] destroy ID [--json]",
      "Stops the sandbox's container under a teardown lease and forgets it. Exit 5 when ID is\n"
      "not tracked here, 6 when another instance holds its lease (nothing is stopped), 4 when\n"
      "the engine fails to stop it.\n\n"
      "Example:\n  sandboxctl destroy 0123456789abcdef\n"};
  po::options_description options("Options");
  options.add_options()("sandbox-id", po::value<std::string>(), "the sandbox to destroy");
  const auto positional = id_positional();
  const auto vm = parse_args(help, options, args, &positional);
  const std::string id = required_id(vm, "destroy");
  Session session(load_command_config(context.config_file), context.logger);
  context.progress->start("stopping sandbox " + id);
  const core::Destroyed destroyed = session.service().destroy(id);
  context.progress->stop();
  session.commit();
  if (json_output(context, vm)) {
    std::cout << core::to_json(destroyed) << "\n";
  } else {
    print_one(destroyed.sandbox, "destroyed");
  }
  return kOk;
}

int cmd_get(GlobalContext& context, const std::vector<std::string>& args) {
  const CommandHelp help{
      "sandboxctl [--config FILE] get ID [--json]",
      "Prints one tracked sandbox: URL, state, conversation and when it was last used (an\n"
      "active sandbox counts this as a use). Reads the registry only. Exit 5 when not tracked.\n\n"
      "Example:\n  sandboxctl get 0123456789abcdef --json\n"};
  po::options_description options("Options");
  options.add_options()("sandbox-id", po::value<std::string>(), "the sandbox to show");
  const auto positional = id_positional();
  const auto vm = parse_args(help, options, args, &positional);
  const std::string id = required_id(vm, "get");
  Session session(load_command_config(context.config_file), context.logger);
  const core::SandboxView tracked = session.service().get(id);
  session.commit();
  if (json_output(context, vm)) {
    std::cout << core::to_json(tracked) << "\n";
  } else {
    print_one(tracked, "");
  }
  return kOk;
}

// ── list ─────────────────────────────────────────────────────────────────────

int cmd_list(GlobalContext& context, const std::vector<std::string>& args) {
  const CommandHelp help{
      "sandboxctl [--config FILE] list [--json]",
      "Shows the active and warm sandboxes of this state directory, every container the\n"
      "backend reports as ours (a container nobody here tracks is an orphan), and each one's\n"
      "lease: owner and time left; then the archived conversations (archive_after_seconds: no\n"
      "container, an archive whose bytes are shown; their next acquire restores them). Exit 4 when "
      "the backend reports that it cannot list its\n"
      "containers (the tracked sandboxes are still shown; local_docker instead logs the failure\n"
      "and lists none, as the reference does).\n\n"
      "Example:\n  sandboxctl list --json\n"};
  po::options_description options("Options");
  const auto vm = parse_args(help, options, args);
  Session session(load_command_config(context.config_file), context.logger);
  const core::Listing listing = session.service().list();
  const std::string& me = listing.owner_id;
  const double now = core::wall_clock_now();
  session.commit();

  if (json_output(context, vm)) {
    std::cout << core::to_json(listing) << "\n";
  } else {
    std::cout << "state directory " << session.state_dir().string() << ", owner " << me << "\n";
    std::printf("%-34s %-7s %-8s %-24s %-24s %-10s %-20s %s\n", "SANDBOX", "STATE", "RUNNING",
                "CONVERSATION", "URL", "SINCE", "DISK", "LEASE");
    for (const auto& row : listing.sandboxes) {
      std::string lease = "none";
      if (row.archived_bytes) {
        lease = "none; archive of " + core::show_size(*row.archived_bytes);
      } else if (!row.lease_error.empty()) {
        lease = "unknown (" + row.lease_error + ")";
      } else if (row.lease) {
        lease =
            (row.lease->destroying ? "del by " : "own by ") +
            (row.lease->owner_id == me ? std::string("this state directory") : row.lease->owner_id);
        if (listing.wall_clock_leases)
          lease += ", " + seconds_text(row.lease->expires_at - now) + " left";
      }
      const std::string conversation = row.thread.empty() ? "-" : row.user + "/" + row.thread;
      const std::string disk =
          row.disk ? core::show_size(row.disk->bytes) + " / " + core::show_size(row.disk->limit)
                   : "unbounded";
      std::printf("%-34s %-7s %-8s %-24s %-24s %-10s %-20s %s\n", row.id.c_str(),
                  std::string(row.state_word()).c_str(),
                  row.archived_bytes ? "no"
                  : row.running      ? (*row.running ? "yes" : "GONE")
                                     : "?",
                  conversation.c_str(), row.url.empty() ? "-" : row.url.c_str(),
                  row.since ? (seconds_text(now - *row.since) + " ago").c_str() : "-", disk.c_str(),
                  lease.c_str());
    }
  }
  if (!listing.snapshot_error.empty()) {
    std::cerr << "sandboxctl: the archived conversations could not be read: "
              << listing.snapshot_error << "\n";
  }
  if (!listing.backend_error.empty()) {
    throw CliError(ErrorKind::unavailable,
                   "the backend could not list its containers: " + listing.backend_error);
  }
  return kOk;
}

// ── reconcile / reap ─────────────────────────────────────────────────────────

int cmd_reconcile(GlobalContext& context, const std::vector<std::string>& args) {
  const CommandHelp help{
      "sandboxctl [--config FILE] reconcile [--json]",
      "One orphan-reconciliation pass: every running container of ours that no live lease\n"
      "covers, and that has stayed unowned for one lease TTL, is adopted into this state\n"
      "directory's warm pool (then reaped like any warm sandbox). Prints adopted / skipped\n"
      "(a live peer owns it) / deferred (owned, or still within the grace) counts.\n"
      "Exit 4 when the backend reports that it cannot list its containers.\n\n"
      "Example:\n  sandboxctl reconcile --json\n"};
  po::options_description options("Options");
  const auto vm = parse_args(help, options, args);
  Session session(load_command_config(context.config_file), context.logger);
  const core::ReconcileReport report = [&] {
    try {
      return session.service().reconcile();
    } catch (...) {
      session.commit();  // what the pass changed (first sightings) is kept either way
      throw;
    }
  }();
  session.commit();
  if (json_output(context, vm)) {
    std::cout << core::to_json(report) << "\n";
  } else {
    std::cout << report.adopted << " adopted, " << report.skipped << " skipped (live peer), "
              << report.deferred << " deferred (owned or within the grace), " << report.found
              << " found\n";
  }
  return kOk;
}

int cmd_reap(GlobalContext& context, const std::vector<std::string>& args) {
  const CommandHelp help{
      "sandboxctl [--config FILE] reap [--json]",
      "One idle pass over this state directory: stops active sandboxes unused for longer than\n"
      "idle_timeout and released ones (warm or paused) released longer ago than that (never one\n"
      "whose lease another instance holds); `idle_timeout: 0` disables that. With\n"
      "pause_after_seconds set and a backend that can pause, it also pauses warm sandboxes\n"
      "released at least that long ago. With archive_after_seconds set and a backend that can\n"
      "snapshot, it first archives conversations' sandboxes released at least that long ago\n"
      "(a snapshot, then the container removed; the next acquire restores it: `archived` in\n"
      "--json). Run it from cron beside `reconcile`.\n\n"
      "Example:\n  sandboxctl reap\n"};
  po::options_description options("Options");
  const auto vm = parse_args(help, options, args);
  Session session(load_command_config(context.config_file), context.logger);
  const int idle_timeout = session.config().idle_timeout;
  const core::Reaped result = session.service().reap(idle_timeout);
  const std::vector<std::string>& reaped = result.reaped;
  session.commit();
  if (json_output(context, vm)) {
    std::cout << core::to_json(result) << "\n";
  } else {
    if (idle_timeout <= 0) {
      std::cout << "idle reaping is disabled (idle_timeout: 0); nothing reaped\n";
    } else {
      std::cout << reaped.size() << " reaped (idle longer than " << idle_timeout << "s), ";
    }
    if (!result.newly_paused.empty()) {
      std::cout << result.newly_paused.size() << " paused (released longer than "
                << session.config().pause_after_seconds << "s ago), ";
    }
    if (!result.archived.empty()) {
      std::cout << result.archived.size() << " archived (released longer than "
                << session.config().archive_after_seconds << "s ago), ";
    }
    std::cout << result.active << " active, " << result.warm << " warm and " << result.paused
              << " paused left\n";
  }
  return kOk;
}

}  // namespace

const std::vector<Command>& commands() {
  static const std::vector<Command> all = {
      {"acquire", "get (reuse, reclaim, discover or create) a conversation's sandbox", cmd_acquire},
      {"release", "park a sandbox in the warm pool (it keeps running)", cmd_release},
      {"destroy", "stop a sandbox and forget it", cmd_destroy},
      {"get", "show one tracked sandbox", cmd_get},
      {"list", "tracked sandboxes, their leases, and orphan containers", cmd_list},
      {"reconcile", "adopt orphan containers whose leases have lapsed", cmd_reconcile},
      {"reap", "stop sandboxes idle longer than idle_timeout", cmd_reap},
      {"serve", "host one provider and answer an HTTP/JSON control API", cmd_serve},
      {"egress", "an allowlist sandbox's way out: allowed names, pending requests, grants",
       cmd_egress},
      {"snapshot", "save a sandbox: its filesystem changes and its conversation's directories",
       cmd_snapshot},
      {"snapshots", "list the snapshots (of one user)", cmd_snapshots},
      {"snapshot-rm", "delete a snapshot and its image", cmd_snapshot_rm},
      {"fork", "make new conversations, each a copy of one sandbox's state", cmd_fork},
      {"plugins", "list the plugin classes found on the plugin path", cmd_plugins},
      {"check-config", "validate the config and print it with secrets redacted", cmd_check_config},
  };
  return all;
}

bool wants_json(const GlobalContext& context, const std::vector<std::string>& args) {
  if (context.json) return true;
  for (const auto& arg : args) {
    if (arg == "--json") return true;
  }
  return false;
}

int run_command(const Command& command, GlobalContext& context,
                const std::vector<std::string>& args) {
  try {
    return command.run(context, args);
  } catch (const HelpShown&) {
    return kOk;
  } catch (const po::error& e) {
    throw CliError(ErrorKind::invalid_argument, std::string(command.name) + ": " + e.what() +
                                                    " (see sandboxctl " + command.name +
                                                    " --help)");
  }
}

}  // namespace sandboxctl
