// The egress proxy (egress_proxy.hpp): its listeners, one per allowlist sandbox, and the calls
// the host and the doors make. What one connection goes through is egress_session.cpp; the
// shared state and its thread model, egress_proxy_impl.hpp; the gateway's decisions,
// egress_decisions.cpp; the resolver, egress_network.cpp.
#include "sandboxd/core/egress_proxy.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstring>
#include <set>
#include <stdexcept>

#include "egress/egress_proxy_impl.hpp"
#include "net/busy_answer.hpp"
#include "net/io_thread.hpp"

namespace sandboxd::core {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

void EgressProxy::Impl::prepare_interception() {
  std::set<std::string> destinations;
  for (const EgressSecret& secret : policy.secrets) {
    if (!secret.https) continue;
    if (!policy.interception_authority) {
      throw std::invalid_argument("secret " + secret.name + " goes to https://" + secret.domain +
                                  ", which needs a CA to end its TLS with (inject_tls_ca)");
    }
    destinations.insert(secret.domain);
  }
  if (destinations.empty()) return;
  const TlsKeyPair& authority = *policy.interception_authority;
  check_certificate_authority(authority);
  constexpr auto kProtocols = asio::ssl::context::default_workarounds |
                              asio::ssl::context::no_sslv2 | asio::ssl::context::no_sslv3 |
                              asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1;
  for (const std::string& destination : destinations) {
    // No ALPN is offered back: the sandbox speaks HTTP/1.1, the one request read here.
    const TlsKeyPair shown = issue_server_certificate(authority, destination, 397);
    auto context = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_server);
    context->set_options(kProtocols);
    context->use_certificate_chain(asio::buffer(shown.certificate_pem));
    context->use_private_key(asio::buffer(shown.key_pem), asio::ssl::context::pem);
    interception_contexts.emplace(destination, std::move(context));
  }
  upstream_tls = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
  upstream_tls->set_options(kProtocols);
  upstream_tls->set_default_verify_paths();
  if (!policy.upstream_roots_pem.empty()) {
    try {
      upstream_tls->add_certificate_authority(asio::buffer(policy.upstream_roots_pem));
    } catch (const boost::system::system_error&) {
      throw std::invalid_argument("upstream_ca_file holds no PEM certificate");
    }
  }
}

void EgressProxy::Impl::count_refusal(const std::string& reason, const std::string& sandbox_id,
                                      const std::string& what) {
  bool log_it = false;
  std::uint64_t skipped = 0;
  {
    MutexLock lock(mutex);
    ++refused[reason];
    const double now = clock->monotonic_now();
    if (now - log_window >= 1.0) {
      log_window = now;
      logged_in_window = 0;
    }
    if (logged_in_window < kLogBurst) {
      ++logged_in_window;
      log_it = true;
      skipped = unlogged;
      unlogged = 0;
    } else {
      ++unlogged;
    }
  }
  if (log_it && logger) {
    logger->log(LogLevel::info,
                "egress: sandbox " + sandbox_id + ": refused " + what +
                    (skipped > 0 ? " (" + std::to_string(skipped) + " earlier refusals not logged)"
                                 : std::string()));
  }
}

void EgressProxy::Impl::accept(const std::string& sandbox_id, std::uint64_t generation) {
  auto it = listeners.find(sandbox_id);
  if (it == listeners.end() || it->second.generation != generation) return;
  it->second.acceptor->async_accept([self = shared_from_this(), sandbox_id, generation](
                                        const boost::system::error_code& ec, tcp::socket socket) {
    if (self->stopped.load()) return;
    const auto listener = self->listeners.find(sandbox_id);
    if (listener == self->listeners.end() || listener->second.generation != generation) return;
    if (ec) {
      if (ec == asio::error::operation_aborted) return;
      // Out of descriptors: the connection waits in the backlog; try again shortly.
      auto retry = std::make_shared<asio::steady_timer>(self->io, std::chrono::milliseconds(100));
      retry->async_wait([self, retry, sandbox_id, generation](const boost::system::error_code&) {
        if (!self->stopped.load()) self->accept(sandbox_id, generation);
      });
      return;
    }
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    if (self->sessions.size() >= self->options.max_connections ||
        self->open_per_sandbox[sandbox_id] >= self->options.max_connections_per_sandbox) {
      self->count_refusal("busy", sandbox_id, "a connection (too many open)");
      net::answer_busy_and_close(socket);
    } else {
      const std::uint64_t id = ++self->next_id;
      auto session = make_egress_session(self, std::move(socket), id, sandbox_id);
      self->sessions.emplace(id, session);
      ++self->open_per_sandbox[sandbox_id];
      ++self->open_connections;
      session->start();
    }
    self->accept(sandbox_id, generation);
  });
}

EgressProxy::EgressProxy(EgressPolicy policy, std::shared_ptr<EgressNetwork> network,
                         EgressOptions options, std::shared_ptr<Logger> logger,
                         std::shared_ptr<Clock> clock)
    : impl_(std::make_shared<Impl>(std::move(policy), std::move(network), std::move(options),
                                   std::move(logger), std::move(clock))) {
  impl_->prepare_interception();
}

EgressProxy::~EgressProxy() {
  stop();
}

void EgressProxy::start() {
  if (impl_->started.exchange(true)) return;
  impl_->work.emplace(impl_->io.get_executor());
  impl_->thread = net::start_io_thread(impl_->io, [impl = impl_](const std::string& failure) {
    if (impl->logger) impl->logger->log(LogLevel::error, "egress: " + failure);
  });
}

void EgressProxy::stop() {
  if (!impl_->started.load() || impl_->stopped.exchange(true)) return;
  asio::post(impl_->io, [impl = impl_] {
    boost::system::error_code ignored;
    for (auto& [id, listener] : impl->listeners) listener.acceptor->close(ignored);
    impl->listeners.clear();
    std::vector<std::shared_ptr<EgressConnection>> open;
    for (const auto& [id, session] : impl->sessions) open.push_back(session);
    for (const auto& session : open) session->close();
    impl->work.reset();
  });
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->resolvers.join();
  // What a resolver posted after the I/O thread ended: run it now, so nothing it holds stays.
  impl_->io.restart();
  impl_->io.run();
}

void EgressProxy::attach(const std::string& sandbox_id, int listening_fd,
                         const std::string& incarnation) {
  impl_->decisions.bind_incarnation(sandbox_id, incarnation);
  {
    MutexLock lock(impl_->mutex);
    impl_->attached_ids[sandbox_id] = net::socket_namespace(listening_fd);
  }
  asio::post(impl_->io, [impl = impl_, sandbox_id, listening_fd] {
    auto acceptor = std::make_unique<tcp::acceptor>(impl->io);
    boost::system::error_code ec;
    acceptor->assign(tcp::v4(), listening_fd, ec);
    if (ec) {
      ::close(listening_fd);
      if (impl->logger) {
        impl->logger->log(LogLevel::error,
                          "egress: cannot serve sandbox " + sandbox_id + ": " + ec.message());
      }
      return;
    }
    auto& listener = impl->listeners[sandbox_id];
    boost::system::error_code ignored;
    if (listener.acceptor) {
      // Replaced: its namespace went away (the sandbox restarted) or the sandbox is a new
      // instance. Nothing of the old one stays open, so nothing keeps its namespace alive.
      listener.acceptor->close(ignored);
      impl->close_sessions_of(sandbox_id);
    }
    listener.acceptor = std::move(acceptor);
    ++listener.generation;
    impl->accept(sandbox_id, listener.generation);
  });
}

void EgressProxy::detach(const std::string& sandbox_id) {
  {
    MutexLock lock(impl_->mutex);
    impl_->attached_ids.erase(sandbox_id);
  }
  impl_->decisions.forget(sandbox_id);
  asio::post(impl_->io, [impl = impl_, sandbox_id] {
    const auto it = impl->listeners.find(sandbox_id);
    if (it != impl->listeners.end()) {
      boost::system::error_code ignored;
      it->second.acceptor->close(ignored);
      impl->listeners.erase(it);
    }
    impl->close_sessions_of(sandbox_id);
  });
}

void EgressProxy::Impl::close_sessions_of(const std::string& sandbox_id) {
  std::vector<std::shared_ptr<EgressConnection>> theirs;
  for (const auto& [id, session] : sessions) {
    if (session->sandbox_id() == sandbox_id) theirs.push_back(session);
  }
  for (const auto& session : theirs) session->close();
}

std::optional<net::NamespaceId> EgressProxy::attached_namespace(
    const std::string& sandbox_id) const {
  MutexLock lock(impl_->mutex);
  const auto it = impl_->attached_ids.find(sandbox_id);
  return it == impl_->attached_ids.end() ? std::nullopt : it->second;
}

void EgressProxy::retain_decisions(
    const std::function<bool(const std::string&, const std::string&)>& keep) {
  impl_->decisions.retain(keep);
}

std::vector<std::string> EgressProxy::attached() const {
  MutexLock lock(impl_->mutex);
  std::vector<std::string> out;
  out.reserve(impl_->attached_ids.size());
  for (const auto& [id, where] : impl_->attached_ids) out.push_back(id);
  return out;
}

bool EgressProxy::is_attached(const std::string& sandbox_id) const {
  MutexLock lock(impl_->mutex);
  return impl_->attached_ids.count(sandbox_id) > 0;
}

std::vector<EgressRequest> EgressProxy::pending(const std::string& sandbox_id) const {
  return impl_->decisions.pending(sandbox_id);
}

std::vector<EgressGrant> EgressProxy::grants(const std::string& sandbox_id) const {
  return impl_->decisions.grants(sandbox_id);
}

void EgressProxy::decide(const std::string& sandbox_id, const std::string& domain,
                         EgressDecision decision) {
  impl_->decisions.decide(sandbox_id, domain, decision);
}

bool EgressProxy::decide_request(const std::string& sandbox_id, const std::string& request_id,
                                 EgressDecision decision) {
  return impl_->decisions.decide_request(sandbox_id, request_id, decision);
}

std::vector<EgressRequest> EgressProxy::consume_events(const std::string& sandbox_id) {
  return impl_->decisions.consume_events(sandbox_id);
}

void EgressProxy::deny_pending(const std::string& sandbox_id) {
  impl_->decisions.deny_pending(sandbox_id);
}

std::string EgressProxy::grants_json() const {
  return impl_->decisions.grants_json();
}

void EgressProxy::restore_grants(const std::string& json) {
  impl_->decisions.restore_grants(json);
}

EgressStats EgressProxy::stats() const {
  EgressStats out;
  out.tunnels = impl_->tunnels.load();
  out.requests = impl_->requests.load();
  out.secrets_injected = impl_->secrets_injected.load();
  out.intercepted = impl_->intercepted.load();
  out.open_connections = impl_->open_connections.load();
  MutexLock lock(impl_->mutex);
  out.refused = impl_->refused;
  out.attached_sandboxes = impl_->attached_ids.size();
  return out;
}

const EgressPolicy& EgressProxy::policy() const {
  return impl_->policy;
}

int make_egress_listener(const std::function<int()>& open_socket) {
  const int fd = open_socket();
  if (fd < 0) throw std::runtime_error("no socket in the sandbox's namespace");
  const int on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(kEgressProxyPort));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(fd, 128) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    throw std::runtime_error(std::string("cannot listen at ") + kEgressProxyHost + ":" +
                             std::to_string(kEgressProxyPort) + " in the sandbox: " + why +
                             " (something in it holds the port)");
  }
  return fd;
}

}  // namespace sandboxd::core
