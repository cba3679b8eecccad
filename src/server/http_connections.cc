#include "server/http_connections.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/log.h"

namespace pdserve::server {
namespace {

using Clock = std::chrono::steady_clock;

double now_s() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

int ms_until(double deadline) {
  const double left = deadline - now_s();
  if (left <= 0) return 0;
  return static_cast<int>(std::min(left * 1000.0 + 1.0, 2e9));
}

/// "ip" and port of a socket address.
void address_of(const sockaddr_storage& a, std::string& ip, int& port) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf);
    port = ntohs(in->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof buf);
    port = ntohs(in6->sin6_port);
  } else {
    port = -1;
  }
  ip = buf;
}

/// A complete response with an OpenAI-style error body, sent without blocking on a
/// connection that is then closed (408, 429, 431: before any request was read).
void send_error_and_forget(int fd, int status, const char* reason, const char* message) {
  const std::string body = std::string(R"({"error":{"message":")") + message +
                           R"(","type":"invalid_request_error","param":null,"code":null}})";
  const std::string resp = "HTTP/1.1 " + std::to_string(status) + " " + reason +
                           "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\n\r\n" + body;
  (void)!::send(fd, resp.data(), resp.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

/// httplib::Stream over a connected socket: buffered reads bounded by a deadline,
/// writes bounded per blocked write, and is_writable() false once the peer hung up.
class ConnStream final : public httplib::Stream {
 public:
  ConnStream(int fd, const ConnectionLimits& l) : fd_(fd), write_timeout_ms_(static_cast<int>(l.write_timeout_s * 1000)) {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) address_of(a, remote_ip_, remote_port_);
    len = sizeof a;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) address_of(a, local_ip_, local_port_);
  }

  void set_read_deadline(double t) { read_deadline_ = t; }
  bool has_buffered() const { return pos_ < len_; }
  const std::string& remote_ip() const { return remote_ip_; }

  bool is_readable() const override { return has_buffered() || wait(POLLIN, ms_until(read_deadline_)); }
  bool is_writable() const override { return wait(POLLOUT, write_timeout_ms_) && peer_connected(); }

  ssize_t read(char* ptr, size_t size) override {
    if (!has_buffered()) {
      if (!wait(POLLIN, ms_until(read_deadline_))) return -1;
      if (size >= sizeof buf_) {  // a large read (a body): straight into the caller's buffer
        const ssize_t n = ::recv(fd_, ptr, size, 0);
        return n < 0 ? -1 : n;
      }
      const ssize_t n = ::recv(fd_, buf_, sizeof buf_, 0);
      if (n <= 0) return n < 0 ? -1 : 0;
      pos_ = 0;
      len_ = static_cast<size_t>(n);
    }
    const size_t k = std::min(size, len_ - pos_);
    std::memcpy(ptr, buf_ + pos_, k);
    pos_ += k;
    return static_cast<ssize_t>(k);
  }

  ssize_t write(const char* ptr, size_t size) override {
    size_t off = 0;
    while (off < size) {
      if (!wait(POLLOUT, write_timeout_ms_)) return -1;
      const ssize_t n = ::send(fd_, ptr + off, size - off, MSG_NOSIGNAL);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) return -1;
      off += static_cast<size_t>(n);
    }
    return static_cast<ssize_t>(size);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = remote_ip_;
    port = remote_port_;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = local_ip_;
    port = local_port_;
  }
  socket_t socket() const override { return fd_; }

  /// False once the peer closed its side or the connection broke (no waiting).
  bool peer_connected() const {
    pollfd p{fd_, POLLRDHUP, 0};
    if (::poll(&p, 1, 0) < 0) return false;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) == 0;
  }

 private:
  bool wait(short events, int timeout_ms) const {
    pollfd p{fd_, events, 0};
    while (true) {
      const int r = ::poll(&p, 1, timeout_ms);
      if (r < 0 && errno == EINTR) continue;
      return r > 0 && (p.revents & (events | POLLHUP)) != 0;
    }
  }

  int fd_;
  int write_timeout_ms_;
  double read_deadline_ = 0;
  char buf_[4096];
  size_t pos_ = 0, len_ = 0;
  std::string remote_ip_, local_ip_;
  int remote_port_ = -1, local_port_ = -1;
};

enum class ConnState { Head, Idle, Busy, Drain };

struct Conn {
  int fd = -1;
  ConnState state = ConnState::Head;
  double deadline = 0;
  size_t served = 0;
  bool close_after = false;
  std::unique_ptr<ConnStream> stream;
};

thread_local Conn* tl_conn = nullptr;

/// httplib's accept loop hands each accepted socket to enqueue(): it is adopted at once
/// (no thread is taken); shutdown() stops the reactor and the workers.
class AdoptingQueue final : public httplib::TaskQueue {
 public:
  explicit AdoptingQueue(std::function<void()> on_shutdown) : on_shutdown_(std::move(on_shutdown)) {}
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override { on_shutdown_(); }

 private:
  std::function<void()> on_shutdown_;
};

}  // namespace

void close_connection_after_response(httplib::Response& res) {
  if (!res.has_header("Connection")) res.set_header("Connection", "close");  // once, however many callers
  if (tl_conn) tl_conn->close_after = true;
}

void set_streamed_content(const httplib::Request& req, httplib::Response& res, const char* content_type,
                          httplib::ContentProviderWithoutLength provider) {
  if (req.version == "HTTP/1.0") {
    close_connection_after_response(res);
    res.set_content_provider(content_type, std::move(provider));
  } else {
    res.set_chunked_content_provider(content_type, std::move(provider));
  }
}

bool client_disconnected() { return tl_conn && !tl_conn->stream->peer_connected(); }

class GuardedServer::Manager {
 public:
  Manager(GuardedServer& svr, ConnectionLimits limits) : svr_(svr), lim_(limits) {
    ep_ = ::epoll_create1(EPOLL_CLOEXEC);
    wake_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = nullptr;  // the wake-up eventfd
    ::epoll_ctl(ep_, EPOLL_CTL_ADD, wake_, &ev);
    reactor_ = std::thread([this] { reactor_loop(); });
    const int n = std::max(1, lim_.http_threads);
    for (int i = 0; i < n; ++i) workers_.emplace_back([this] { worker_loop(); });
  }

  ~Manager() { shutdown(); }

  /// Takes over an accepted socket (from httplib's accept thread).
  void adopt(int fd) {
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->stream = std::make_unique<ConnStream>(fd, lim_);
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_) {
      ::close(fd);
      return;
    }
    int& count = per_ip_[c->stream->remote_ip()];
    if (count >= lim_.max_connections_per_client) {
      PDS_LOG_DEBUG("{}: more than {} connections from this address; refused", c->stream->remote_ip(),
                    lim_.max_connections_per_client);
      send_error_and_forget(fd, 429, "Too Many Requests", "Too many concurrent connections from this address.");
      ::close(fd);
      return;
    }
    ++count;
    Conn* raw = c.get();
    conns_[fd] = std::move(c);
    arm(raw, ConnState::Head, now_s() + lim_.header_timeout_s);
  }

  void shutdown() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (stop_) return;
      stop_ = true;
    }
    const uint64_t one = 1;
    (void)!::write(wake_, &one, sizeof one);
    cv_.notify_all();
    if (reactor_.joinable()) reactor_.join();
    for (auto& t : workers_) t.join();
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& [fd, c] : conns_) ::close(fd);
    conns_.clear();
    per_ip_.clear();
    ::close(ep_);
    ::close(wake_);
  }

 private:
  // Registers `c` with the reactor in `state` until `deadline`. Caller holds mu_.
  void arm(Conn* c, ConnState state, double deadline) {
    c->state = state;
    c->deadline = deadline;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
    ev.data.ptr = c;
    ::epoll_ctl(ep_, EPOLL_CTL_ADD, c->fd, &ev);
    const uint64_t one = 1;
    (void)!::write(wake_, &one, sizeof one);  // the nearest deadline may have changed
  }

  // Closes and forgets `c`. Caller holds mu_.
  void release(Conn* c) {
    if (c->state != ConnState::Busy) ::epoll_ctl(ep_, EPOLL_CTL_DEL, c->fd, nullptr);
    auto it = per_ip_.find(c->stream->remote_ip());
    if (it != per_ip_.end() && --it->second <= 0) per_ip_.erase(it);
    const int fd = c->fd;
    conns_.erase(fd);  // destroys c
    ::close(fd);
  }

  void reactor_loop() {
    std::vector<epoll_event> events(256);
    std::vector<char> peek(lim_.max_header_bytes + 1);
    while (true) {
      int timeout = 1000;
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (stop_) return;
        for (auto& [fd, c] : conns_)
          if (c->state != ConnState::Busy) timeout = std::min(timeout, ms_until(c->deadline));
      }
      const int n = ::epoll_wait(ep_, events.data(), static_cast<int>(events.size()), timeout);
      std::lock_guard<std::mutex> lk(mu_);
      if (stop_) return;
      for (int i = 0; i < n; ++i) {
        Conn* c = static_cast<Conn*>(events[static_cast<size_t>(i)].data.ptr);
        if (!c) {
          uint64_t v;
          (void)!::read(wake_, &v, sizeof v);
          continue;
        }
        if (c->state == ConnState::Busy) continue;
        on_readable(c, peek);
      }
      expire();
    }
  }

  // Caller holds mu_.
  void on_readable(Conn* c, std::vector<char>& peek) {
    if (c->state == ConnState::Drain) {  // a refused body: read and drop until EOF
      while (true) {
        const ssize_t r = ::recv(c->fd, peek.data(), peek.size(), MSG_DONTWAIT);
        if (r > 0) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        return release(c);
      }
    }
    const ssize_t r = ::recv(c->fd, peek.data(), peek.size(), MSG_PEEK | MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (r <= 0) return release(c);  // the client hung up (or the socket broke)
    if (c->state == ConnState::Idle) {  // a new request begins: its head has a deadline
      c->state = ConnState::Head;
      c->deadline = now_s() + lim_.header_timeout_s;
    }
    const std::string_view head(peek.data(), static_cast<size_t>(r));
    if (head.find("\r\n\r\n") != std::string_view::npos || head.find("\n\n") != std::string_view::npos) {
      ::epoll_ctl(ep_, EPOLL_CTL_DEL, c->fd, nullptr);
      c->state = ConnState::Busy;
      ready_.push_back(c);
      cv_.notify_one();
      return;
    }
    if (static_cast<size_t>(r) > lim_.max_header_bytes) {
      send_error_and_forget(c->fd, 431, "Request Header Fields Too Large", "The request head is too large.");
      return release(c);
    }
  }

  // Closes connections past their deadline. Caller holds mu_.
  void expire() {
    const double now = now_s();
    std::vector<Conn*> late;
    for (auto& [fd, c] : conns_)
      if (c->state != ConnState::Busy && c->deadline <= now) late.push_back(c.get());
    for (Conn* c : late) {
      if (c->state == ConnState::Head) {
        PDS_LOG_DEBUG("{}: request head not complete within {} s; closed", c->stream->remote_ip(), lim_.header_timeout_s);
        send_error_and_forget(c->fd, 408, "Request Timeout", "The request head did not arrive in time.");
      }
      release(c);
    }
  }

  void worker_loop() {
    while (true) {
      Conn* c;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !ready_.empty(); });
        if (stop_) return;
        c = ready_.front();
        ready_.pop_front();
      }
      serve(c);
    }
  }

  // Runs requests on `c` (its head has arrived) until it goes back to the reactor or closes.
  void serve(Conn* c) {
    tl_conn = c;
    double head_deadline = c->deadline;  // the first request's head is complete already
    while (true) {
      c->stream->set_read_deadline(std::max(head_deadline, now_s() + lim_.read_timeout_s));
      bool closed = false;
      const bool last = ++c->served >= lim_.keep_alive_max_count || stopping();
      const bool ok = svr_.process_one(*c->stream, last, closed);
      if (ok && !closed && !last && !c->close_after && !stopping() && c->stream->has_buffered()) {
        head_deadline = now_s() + lim_.header_timeout_s;  // a pipelined request: served here
        continue;
      }
      tl_conn = nullptr;
      std::lock_guard<std::mutex> lk(mu_);
      if (ok && !closed && !last && !c->close_after && !stop_) {
        arm(c, ConnState::Idle, now_s() + lim_.idle_timeout_s);
      } else if (c->close_after && !stop_) {
        // The response is out; the rest of the request is read and dropped so that the
        // client sees the response rather than a reset.
        ::shutdown(c->fd, SHUT_WR);
        arm(c, ConnState::Drain, now_s() + 2.0);
      } else {
        release(c);
      }
      return;
    }
  }

  bool stopping() {
    std::lock_guard<std::mutex> lk(mu_);
    return stop_;
  }

  GuardedServer& svr_;
  ConnectionLimits lim_;
  int ep_ = -1;
  int wake_ = -1;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::deque<Conn*> ready_;
  std::unordered_map<int, std::unique_ptr<Conn>> conns_;
  std::unordered_map<std::string, int> per_ip_;
  std::thread reactor_;
  std::vector<std::thread> workers_;
};

GuardedServer::GuardedServer(ConnectionLimits limits) : limits_(limits) {
  set_keep_alive_timeout(static_cast<time_t>(std::max(1.0, limits_.idle_timeout_s)));
  set_keep_alive_max_count(limits_.keep_alive_max_count);
  new_task_queue = [this] {
    manager_ = std::make_unique<Manager>(*this, limits_);
    return new AdoptingQueue([this] { manager_->shutdown(); });
  };
}

GuardedServer::~GuardedServer() = default;

bool GuardedServer::process_and_close_socket(socket_t sock) {
  manager_->adopt(sock);
  return true;
}

bool GuardedServer::process_one(httplib::Stream& strm, bool close_connection, bool& connection_closed) {
  return process_request(strm, close_connection, connection_closed, nullptr);
}

}  // namespace pdserve::server
