// `sandboxctl snapshot`, `snapshots`, `snapshot-rm` and `fork` (docs/snapshots.md): a
// conversation's sandbox saved (its filesystem changes and its conversation's directories),
// listed, deleted, or forked into new conversations. A sandbox is made from a snapshot with
// `sandboxctl acquire --from-snapshot NAME`.
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>

#include "cli_error.hpp"
#include "commands.hpp"
#include "sandboxd/core/service_json.hpp"
#include "sandboxd/core/thread_storage.hpp"
#include "session.hpp"

namespace sandboxctl {

namespace po = boost::program_options;
namespace core = sandboxd::core;

namespace {

void print_snapshot(const core::SnapshotRecord& s) {
  std::cout << "name:        " << s.name << "\n"
            << "user:        " << s.user_id << "\n"
            << "of:          " << s.user_id << "/" << s.thread_id << " (sandbox " << s.sandbox_id
            << ", network " << s.network_policy << ")\n"
            << "holds:       " << core::show_size(s.directory_bytes) << " of directories, "
            << core::show_size(s.image_bytes) << " of filesystem changes\n"
            << "expires:     "
            << (s.expires_at > 0 ? std::to_string(static_cast<long long>(s.expires_at -
                                                                         core::wall_clock_now())) +
                                       " s from now"
                                 : std::string("never"))
            << "\n";
}

}  // namespace

int cmd_snapshot(GlobalContext& context, const std::vector<std::string>& args) {
  const CommandHelp help{
      "sandboxctl [--config FILE] snapshot ID [--name NAME] [--json]",
      "Saves sandbox ID (tracked here, a conversation's): what it wrote outside its mounts (the\n"
      "engine's commit, to an image of ours never pushed anywhere) and its conversation's\n"
      "directories (user-data, acp-workspace), taken while it is paused for the instant.\n"
      "Process memory is not kept. The snapshot is its user's; `acquire --from-snapshot NAME`\n"
      "makes a sandbox from it. Exit 5 when ID is not tracked, 7 past the user's ceilings\n"
      "(max_snapshots_per_user, max_snapshot_bytes_per_user), 8 when the backend cannot take\n"
      "snapshots.\n\n"
      "Example:\n  sandboxctl snapshot 0123456789abcdef --name before-upgrade\n"};
  po::options_description options("Options");
  options.add_options()("sandbox-id", po::value<std::string>(), "the sandbox to save")(
      "name", po::value<std::string>(),
      "the snapshot's name (1-64 of letters, digits, '_', '-'; default: snap-{16 hex})");
  po::positional_options_description positional;
  positional.add("sandbox-id", 1);
  const auto vm = parse_args(help, options, args, &positional);
  if (!vm.count("sandbox-id")) {
    throw CliError(ErrorKind::invalid_argument,
                   "snapshot needs a sandbox id (sandboxctl snapshot ID; sandboxctl list shows "
                   "them)");
  }
  std::optional<std::string> name;
  if (vm.count("name")) name = vm["name"].as<std::string>();
  Session session(load_command_config(context.config_file), context.logger);
  context.progress->start("saving sandbox " + vm["sandbox-id"].as<std::string>());
  const core::SnapshotRecord made =
      session.service().snapshot(vm["sandbox-id"].as<std::string>(), name);
  context.progress->stop();
  session.commit();
  if (json_output(context, vm)) {
    std::cout << core::to_json(made) << "\n";
  } else {
    print_snapshot(made);
  }
  return kOk;
}

int cmd_snapshots(GlobalContext& context, const std::vector<std::string>& args) {
  const CommandHelp help{
      "sandboxctl [--config FILE] snapshots [--user U] [--json]",
      "Lists the snapshots of this state directory (of user U only with --user), oldest first,\n"
      "with the conversation each was taken of and the disk each holds.\n\n"
      "Example:\n  sandboxctl snapshots --user alice\n"};
  po::options_description options("Options");
  options.add_options()("user,u", po::value<std::string>(), "only this user's");
  const auto vm = parse_args(help, options, args);
  std::optional<std::string> user;
  if (vm.count("user")) user = vm["user"].as<std::string>();
  Session session(load_command_config(context.config_file), context.logger);
  const std::vector<core::SnapshotRecord> all = session.service().snapshots(user);
  session.commit();
  if (json_output(context, vm)) {
    std::cout << core::to_json(all) << "\n";
    return kOk;
  }
  std::printf("%-24s %-16s %-24s %-12s %s\n", "NAME", "USER", "CONVERSATION", "DISK", "NETWORK");
  std::uint64_t total = 0;
  for (const auto& s : all) {
    total += s.bytes();
    std::printf("%-24s %-16s %-24s %-12s %s\n", s.name.c_str(), s.user_id.c_str(),
                (s.user_id + "/" + s.thread_id).c_str(), core::show_size(s.bytes()).c_str(),
                s.network_policy.c_str());
  }
  std::cout << all.size() << " snapshots, " << core::show_size(total) << "\n";
  return kOk;
}

int cmd_snapshot_rm(GlobalContext& context, const std::vector<std::string>& args) {
  const CommandHelp help{
      "sandboxctl [--config FILE] snapshot-rm NAME --user U [--json]",
      "Deletes user U's snapshot NAME: its directories and its image. Exit 5 when there is\n"
      "none.\n\n"
      "Example:\n  sandboxctl snapshot-rm before-upgrade --user alice\n"};
  po::options_description options("Options");
  options.add_options()("name", po::value<std::string>(), "the snapshot to delete")(
      "user,u", po::value<std::string>(), "whose it is");
  po::positional_options_description positional;
  positional.add("name", 1);
  const auto vm = parse_args(help, options, args, &positional);
  if (!vm.count("name") || !vm.count("user")) {
    throw CliError(ErrorKind::invalid_argument,
                   "snapshot-rm needs the snapshot's name and its user (sandboxctl snapshot-rm "
                   "NAME --user U; sandboxctl snapshots shows them)");
  }
  Session session(load_command_config(context.config_file), context.logger);
  const core::SnapshotRecord gone =
      session.service().delete_snapshot(vm["user"].as<std::string>(), vm["name"].as<std::string>());
  session.commit();
  if (json_output(context, vm)) {
    std::cout << core::to_json(gone) << "\n";
  } else {
    std::cout << "deleted snapshot " << gone.name << " of user " << gone.user_id << " ("
              << core::show_size(gone.bytes()) << ")\n";
  }
  return kOk;
}

int cmd_fork(GlobalContext& context, const std::vector<std::string>& args) {
  const CommandHelp help{
      "sandboxctl [--config FILE] fork ID (--thread T [--thread T2 ...] | --count N) [--json]",
      "Makes new conversations of sandbox ID's user, each with a sandbox made from ID's state\n"
      "as it is now (its filesystem changes and its conversation's directories, each new\n"
      "conversation with its own copy): the named threads, or N of them named fork-{16 hex};\n"
      "1 to 32. ID is snapshotted once (paused for the instant) and the snapshot restored into\n"
      "each new conversation in parallel under the usual ceilings, then deleted. All or none:\n"
      "when one cannot be made, none is kept. Prints each new sandbox (path restored); release\n"
      "or destroy each as usual. Exit 5 when ID is not tracked, 6 when a named conversation\n"
      "exists already, 7 past a ceiling, 8 when the backend cannot take snapshots.\n\n"
      "Example:\n  sandboxctl fork 0123456789abcdef --count 3\n"
      "  sandboxctl fork 0123456789abcdef --thread try-a --thread try-b\n"};
  po::options_description options("Options");
  options.add_options()("sandbox-id", po::value<std::string>(), "the sandbox to fork")(
      "thread,t", po::value<std::vector<std::string>>(), "a new conversation's thread id")(
      "count,n", po::value<std::size_t>(), "how many new conversations, named for you");
  po::positional_options_description positional;
  positional.add("sandbox-id", 1);
  const auto vm = parse_args(help, options, args, &positional);
  if (!vm.count("sandbox-id")) {
    throw CliError(ErrorKind::invalid_argument,
                   "fork needs a sandbox id (sandboxctl fork ID --count N; sandboxctl list shows "
                   "them)");
  }
  std::vector<std::string> threads;
  if (vm.count("thread")) threads = vm["thread"].as<std::vector<std::string>>();
  std::optional<std::size_t> count;
  if (vm.count("count")) count = vm["count"].as<std::size_t>();
  if (threads.empty() && !count) {
    throw CliError(ErrorKind::invalid_argument,
                   "fork needs the new conversations: --thread T (repeated) or --count N");
  }
  const std::string id = vm["sandbox-id"].as<std::string>();
  Session session(load_command_config(context.config_file), context.logger);
  context.progress->start("forking sandbox " + id + " into " +
                          std::to_string(threads.empty() ? *count : threads.size()) +
                          " conversations");
  const core::Forked forked = session.service().fork(id, threads, count);
  context.progress->stop();
  session.commit();
  if (json_output(context, vm)) {
    std::cout << core::to_json(forked) << "\n";
    return kOk;
  }
  std::printf("%-18s %-28s %-9s %s\n", "SANDBOX", "CONVERSATION", "PATH", "URL");
  for (const core::Acquired& made : forked.sandboxes) {
    std::printf("%-18s %-28s %-9s %s\n", made.sandbox_id.c_str(),
                (made.user_id.value_or("") + "/" + made.thread_id.value_or("")).c_str(),
                core::to_string(made.path), made.sandbox_url.c_str());
  }
  std::cout << forked.sandboxes.size()
            << (forked.sandboxes.size() == 1 ? " conversation" : " conversations")
            << " forked from sandbox " << forked.from_sandbox_id << "\n";
  return kOk;
}

}  // namespace sandboxctl
