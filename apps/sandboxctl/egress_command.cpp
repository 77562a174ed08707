// `sandboxctl egress`: what an allowlist sandbox may reach, and the operator's word
// on it, through the serve that runs its egress proxy (serve_egress.hpp's routes). The proxy
// lives in serve, so this command talks to it: by default on {state dir}/serve.sock.
#include <rapidjson/document.h>

#include <boost/program_options.hpp>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli_error.hpp"
#include "commands.hpp"
#include "sandboxd/core/config.hpp"
#include "sandboxd/core/paths.hpp"
#include "sandboxd/core/service_errors.hpp"
#include "sandboxd/http.hpp"
#include "sandboxd/json.hpp"
#include "session.hpp"

namespace sandboxctl {

namespace po = boost::program_options;
namespace core = sandboxd::core;

namespace {

ErrorKind kind_named(const std::string& name) {
  for (const ErrorKind kind :
       {ErrorKind::invalid_argument, ErrorKind::not_found, ErrorKind::conflict, ErrorKind::capacity,
        ErrorKind::unavailable, ErrorKind::config, ErrorKind::internal, ErrorKind::unsupported}) {
    if (name == core::kind_name(kind)) return kind;
  }
  return ErrorKind::internal;
}

// One call to serve; its document, or the error it answered as a CliError.
std::string call_serve(const std::string& address, const std::string& token,
                       const std::string& method, const std::string& path,
                       const std::string& body = "") {
  sandboxd::http::Request request;
  request.method = method;
  if (address.rfind("unix:", 0) == 0) {
    request.unix_socket = address.substr(5);
    request.url = "http://serve" + path;
  } else {
    request.url = (address.rfind("http://", 0) == 0 ? address : "http://" + address) + path;
  }
  request.json_body = body;
  if (method == "POST" && body.empty()) request.json_body = "{}";
  if (!token.empty()) request.headers.push_back("Authorization: Bearer " + token);
  request.timeout_seconds = 30;
  sandboxd::http::Response response;
  try {
    response = sandboxd::http::perform(request);
  } catch (const std::exception& e) {
    throw CliError(ErrorKind::unavailable, "cannot reach serve at " + address + ": " + e.what() +
                                               " (is `sandboxctl serve` running? --serve names "
                                               "another address)");
  }
  if (response.status == 200) return response.body;
  rapidjson::Document doc;
  if (sandboxd::parse_json(doc, response.body) && doc.IsObject() && doc.HasMember("error") &&
      doc["error"].IsObject()) {
    const auto& error = doc["error"];
    const std::string kind =
        error.HasMember("kind") && error["kind"].IsString() ? error["kind"].GetString() : "";
    const std::string message = error.HasMember("message") && error["message"].IsString()
                                    ? error["message"].GetString()
                                    : "";
    throw CliError(kind_named(kind), message);
  }
  throw CliError(ErrorKind::unavailable,
                 "serve at " + address + " answered HTTP " + std::to_string(response.status));
}

void print_view(const std::string& json) {
  rapidjson::Document doc;
  if (!sandboxd::parse_json(doc, json) || !doc.IsObject()) {
    std::cout << json << "\n";
    return;
  }
  std::cout << "sandbox " << doc["sandbox_id"].GetString() << ": network mode "
            << doc["mode"].GetString() << ", approval " << doc["approval"].GetString()
            << ", temporary grants " << doc["temporary_grant_ttl"].GetDouble() << " s\n";
  std::string allowed;
  for (const auto& entry : doc["allow_domains"].GetArray()) {
    allowed += (allowed.empty() ? "" : ", ") + std::string(entry.GetString());
  }
  std::cout << "allowed:  " << (allowed.empty() ? "(none)" : allowed) << "\n";
  for (const auto& grant : doc["grants"].GetArray()) {
    const auto port = grant.FindMember("port");
    const bool one_port = port != grant.MemberEnd() && port->value.IsInt();
    std::cout << "granted:  " << grant["domain"].GetString()
              << (one_port ? ":" + std::to_string(port->value.GetInt()) : std::string(" (80, 443)"))
              << (grant["expires"].IsNull()
                      ? std::string(" (for the sandbox's life)")
                      : " (until " +
                            std::to_string(static_cast<long long>(grant["expires"].GetDouble())) +
                            ")")
              << "\n";
  }
  for (const auto& request : doc["pending"].GetArray()) {
    std::cout << "pending:  " << request["request_id"].GetString() << " "
              << request["method"].GetString() << " " << request["host"].GetString() << ":"
              << request["port"].GetInt() << " (" << request["count"].GetUint64()
              << (request["count"].GetUint64() == 1 ? " time" : " times") << ")\n";
  }
}

}  // namespace

int cmd_egress(GlobalContext& context, const std::vector<std::string>& args) {
  const CommandHelp help{
      "sandboxctl [--config FILE] egress ID [allow DOMAIN [--temporary] | deny DOMAIN |\n"
      "                                      decide REQUEST_ID DECISION] [--serve ADDR]\n"
      "                                      [--token-env NAME] [--json]",
      "Network mode allowlist: what sandbox ID may reach through the egress proxy of\n"
      "the serve that runs it, the requests it was refused that wait for a decision (approval\n"
      "prompt), and the grants. `allow DOMAIN` grants a name for the sandbox's life\n"
      "(--temporary: for the configured temporary_grant_ttl); `deny DOMAIN` takes a grant back\n"
      "and drops the name's pending requests; `decide REQUEST_ID deny|allow_temporary|\n"
      "allow_sandbox` answers one pending request. A grant applies to new connections at once\n"
      "and outlives a serve restart. Talks to serve at --serve (default unix:{state dir}/\n"
      "serve.sock; or http://HOST:PORT with the bearer token in $SANDBOXD_TOKEN or --token-env);\n"
      "a serve over sandboxd-provisioner (remote_provisioner) forwards to the provisioner's proxy.\n"
      "Exit 5 when serve does not track the sandbox, 4 when serve cannot be reached.\n\n"
      "Examples:\n  sandboxctl egress 0123456789abcdef\n"
      "  sandboxctl egress 0123456789abcdef allow pypi.org --temporary\n"};
  po::options_description options("Options");
  options.add_options()("words", po::value<std::vector<std::string>>()->multitoken(),
                        "ID, then what to do")("temporary",
                                               "with allow: for temporary_grant_ttl only")(
      "serve", po::value<std::string>(), "serve's address (unix:PATH or http://HOST:PORT)")(
      "token-env", po::value<std::string>()->default_value("SANDBOXD_TOKEN"),
      "the environment variable holding serve's bearer token (TCP only)");
  po::positional_options_description positional;
  positional.add("words", -1);
  const auto vm = parse_args(help, options, args, &positional);
  const auto words =
      vm.count("words") ? vm["words"].as<std::vector<std::string>>() : std::vector<std::string>{};
  if (words.empty()) throw CliError(ErrorKind::invalid_argument, "egress: which sandbox? (ID)");
  const std::string& id = words[0];
  core::validate_sandbox_id(id);
  std::string address;
  if (vm.count("serve")) {
    address = vm["serve"].as<std::string>();
  } else {
    const core::SandboxConfig config = load_command_config(context.config_file);
    address = "unix:" + (core::resolve_base_dir(config.base_dir) / "serve.sock").string();
  }
  const char* token_value = std::getenv(vm["token-env"].as<std::string>().c_str());
  const std::string token = token_value ? token_value : "";
  const std::string base = "/v1/sandboxes/" + id + "/egress";

  std::string answer;
  const std::string verb = words.size() > 1 ? words[1] : "list";
  const auto need = [&](std::size_t count, const char* what) {
    if (words.size() != count) {
      throw CliError(ErrorKind::invalid_argument, std::string("egress ") + verb + ": " + what);
    }
  };
  const auto decide = [&](const std::string& key, const std::string& value,
                          const std::string& decision) {
    rapidjson::StringBuffer buffer;
    rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
    w.StartObject();
    sandboxd::write_json_member(w, key.c_str(), value);
    sandboxd::write_json_member(w, "decision", decision);
    w.EndObject();
    return call_serve(address, token, "POST", base + "/decide", buffer.GetString());
  };
  if (verb == "list") {
    need(words.size() > 1 ? 2 : 1, "takes nothing more");
    answer = call_serve(address, token, "GET", base);
    if (!json_output(context, vm)) {
      print_view(answer);
      return kOk;
    }
  } else if (verb == "allow") {
    need(3, "needs a DOMAIN");
    answer =
        decide("domain", words[2], vm.count("temporary") ? "allow_temporary" : "allow_sandbox");
  } else if (verb == "deny") {
    need(3, "needs a DOMAIN");
    answer = decide("domain", words[2], "deny");
  } else if (verb == "decide") {
    need(4, "needs REQUEST_ID and deny, allow_temporary or allow_sandbox");
    answer = decide("request_id", words[2], words[3]);
    if (answer.find("true") == std::string::npos) {
      throw CliError(ErrorKind::not_found, "no pending request " + words[2] + " for sandbox " + id);
    }
  } else {
    throw CliError(ErrorKind::invalid_argument,
                   "egress: '" + verb + "' is not list, allow, deny or decide");
  }
  if (json_output(context, vm)) {
    std::cout << answer << "\n";
  } else if (verb != "list") {
    std::cout << "sandbox " << id << ": " << verb << " " << words[2] << " done\n";
  }
  return kOk;
}

}  // namespace sandboxctl
