// The egress proxy's shared state (egress_proxy.hpp), private to its two files: the proxy's
// listeners and public calls (egress_proxy.cpp) and one sandbox connection's protocol
// (egress_session.cpp).
//
// Thread model: one I/O thread owns every listener, socket, timer and parser, and `listeners`,
// `sessions`, `open_per_sandbox` and `next_id`; name resolution (which blocks) runs on
// `resolvers` and posts its answer back. The doors ask and decide from their own threads:
// pending requests and grants are `decisions` (its own lock); `mutex` guards the refusal counts,
// the log budget and the attached ids, and is never held across I/O or a resolution.
#pragma once

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "egress/egress_decisions.hpp"
#include "sandboxd/core/socket_namespace.hpp"
#include "sandboxd/core/egress_proxy.hpp"
#include "sandboxd/thread_annotations.hpp"

namespace sandboxd::core {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// One connection from a sandbox, as the proxy's bookkeeping sees it.
class EgressConnection {
 public:
  virtual ~EgressConnection() = default;
  virtual void start() = 0;  // I/O thread, once, after it is counted in `sessions`
  virtual const std::string& sandbox_id() const = 0;
  virtual void close() = 0;  // I/O thread; idempotent
};

struct EgressProxy::Impl : std::enable_shared_from_this<EgressProxy::Impl> {
  Impl(EgressPolicy p, std::shared_ptr<EgressNetwork> n, EgressOptions o, std::shared_ptr<Logger> l,
       std::shared_ptr<Clock> c)
      : policy(std::move(p)),
        network(std::move(n)),
        options(std::move(o)),
        logger(std::move(l)),
        clock(std::move(c)),
        decisions(clock, {.prompt = policy.prompt,
                          .temporary_grant_ttl = policy.temporary_grant_ttl,
                          .max_pending_per_sandbox = options.max_pending_per_sandbox}) {}

  const EgressPolicy policy;
  const std::shared_ptr<EgressNetwork> network;
  const EgressOptions options;
  const std::shared_ptr<Logger> logger;
  const std::shared_ptr<Clock> clock;
  // Pending requests and grants (approval `prompt`): its own lock story.
  EgressDecisions decisions;

  asio::io_context io{1};
  // Keeps the I/O thread running with no listener yet; reset by stop() on the I/O thread.
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  asio::thread_pool resolvers{2};
  std::thread thread;
  std::atomic<bool> started{false}, stopped{false};

  // I/O thread only.
  struct Listener {
    std::unique_ptr<tcp::acceptor> acceptor;
    std::uint64_t generation = 0;
  };
  std::map<std::string, Listener> listeners;
  std::map<std::uint64_t, std::shared_ptr<EgressConnection>> sessions;
  std::map<std::string, std::size_t> open_per_sandbox;
  std::uint64_t next_id = 0;
  // Plain requests' bodies held whole at once, in all (options.max_held_body_bytes bounds it).
  std::size_t held_body_bytes = 0;

  // Refusal counts and attached ids, asked from any thread (the doors, the I/O thread); never
  // held across I/O or a resolution.
  mutable Mutex mutex;
  std::map<std::string, std::uint64_t> refused GUARDED_BY(mutex);
  // Each attached sandbox's listener: the namespace it was made in (nullopt: unknown).
  std::map<std::string, std::optional<net::NamespaceId>> attached_ids GUARDED_BY(mutex);
  // Log lines about refusals: at most kLogBurst a second, the rest counted.
  double log_window GUARDED_BY(mutex) = 0;
  int logged_in_window GUARDED_BY(mutex) = 0;
  std::uint64_t unlogged GUARDED_BY(mutex) = 0;
  static constexpr int kLogBurst = 20;

  std::atomic<std::uint64_t> tunnels{0}, requests{0}, secrets_injected{0}, intercepted{0},
      open_connections{0};

  // TLS interception (https secrets): the certificate shown for each destination, and the
  // trust the real destinations are verified with. Made by the constructor, read-only after.
  std::map<std::string, std::shared_ptr<asio::ssl::context>> interception_contexts;
  std::shared_ptr<asio::ssl::context> upstream_tls;

  // Made once by the constructor: a certificate for each https secret's destination, signed by
  // the operator's CA, and the trust their real servers are verified with. Throws
  // std::invalid_argument naming what cannot be used.
  void prepare_interception();

  asio::ssl::context* interception_context(const std::string& domain) const {
    const auto it = interception_contexts.find(domain);
    return it == interception_contexts.end() ? nullptr : it->second.get();
  }

  void accept(const std::string& sandbox_id, std::uint64_t generation);
  // Every open connection of `sandbox_id` closed. I/O thread.
  void close_sessions_of(const std::string& sandbox_id);
  void forget(std::uint64_t id, const std::string& sandbox_id) {
    if (sessions.erase(id) > 0) {
      --open_connections;
      if (--open_per_sandbox[sandbox_id] == 0) open_per_sandbox.erase(sandbox_id);
    }
  }

  // Whether `domain` may be reached by `sandbox_id` now: on the allow-list or granted; a
  // refused one is recorded as pending under approval `prompt`.
  bool allowed(const std::string& sandbox_id, const std::string& domain, int port,
               const std::string& method) {
    return policy.allow.allows(domain) || decisions.granted(sandbox_id, domain, port, method);
  }

  // Counts a refusal by `reason` and logs it (`what` was refused), at most kLogBurst lines a
  // second, the rest counted into the next line. Any thread.
  void count_refusal(const std::string& reason, const std::string& sandbox_id,
                     const std::string& what) EXCLUDES(mutex);
};

// A connection for `client`, accepted on `sandbox_id`'s listener (egress_session.cpp); it serves
// once started. I/O thread.
std::shared_ptr<EgressConnection> make_egress_session(std::shared_ptr<EgressProxy::Impl> impl,
                                                      boost::asio::ip::tcp::socket client,
                                                      std::uint64_t id, std::string sandbox_id);

}  // namespace sandboxd::core
