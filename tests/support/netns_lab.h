// Integration-test helper: a small "network" of Linux network namespaces, one per host,
// each joined to a bridge in the test's namespace by a veth pair, with its own address
// 10.A.B.(i+2)/24 (the bridge is 10.A.B.1, so the test reaches every host). Names and the
// subnet are derived from the test's pid, so concurrent runs do not collide; leftovers of
// runs whose process is gone are removed first. The destructor deletes everything (also
// when the test fails). Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN): ok() is false with
// error() otherwise — callers FAIL on it, never skip.
//
//   NetnsLab lab({"router", "decode0"});
//   ASSERT_TRUE(lab.ok()) << lab.error();
//   lab.exec_prefix("router")   // {"ip", "netns", "exec", "pdmh1234-router"}
//   lab.ip("router")            // "10.134.12.2"
//   lab.set_link("decode0", false);   // cut the host's link (ip link set ... down)
//   lab.shape("decode0", "100mbit");  // tc tbf on the host's egress and ingress side
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace pdserve::testing {

class NetnsLab {
 public:
  explicit NetnsLab(std::vector<std::string> hosts) : hosts_(std::move(hosts)) {
    const int pid = static_cast<int>(::getpid());
    static int instances = 0;
    const int n = instances++;
    // "pdmh" + pid + one letter per lab of this process: ≤ 12 chars, interface names < 16.
    tag_ = "pdmh" + std::to_string(pid) + static_cast<char>('a' + n % 26);
    subnet_ = "10." + std::to_string(100 + pid % 100) + "." + std::to_string((pid / 100 + n) % 250) + ".";
    bridge_ = tag_ + "br";
    cleanup_stale();
    ok_ = setup();
    if (!ok_) teardown();
  }
  ~NetnsLab() { teardown(); }
  NetnsLab(const NetnsLab&) = delete;
  NetnsLab& operator=(const NetnsLab&) = delete;

  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  std::string ns(const std::string& host) const { return tag_ + "-" + host; }
  std::string ip(const std::string& host) const { return subnet_ + std::to_string(index(host) + 2); }
  std::string bridge_ip() const { return subnet_ + "1"; }
  std::vector<std::string> exec_prefix(const std::string& host) const { return {"/usr/sbin/ip", "netns", "exec", ns(host)}; }
  /// The bridge-side end of the host's veth pair.
  std::string host_veth(const std::string& host) const { return tag_ + "v" + std::to_string(index(host)); }

  /// Brings the host's link up or down (both ends: no carrier, packets vanish, no RST).
  bool set_link(const std::string& host, bool up) {
    const char* st = up ? "up" : "down";
    return run("ip link set " + host_veth(host) + " " + st) &&
           run("ip -n " + ns(host) + " link set eth0 " + st);
  }
  /// Token-bucket shaping (tc tbf) of the host's traffic both ways at `rate` (e.g.
  /// "1gbit"); "" removes it.
  bool shape(const std::string& host, const std::string& rate) {
    run("tc qdisc del dev " + host_veth(host) + " root 2>/dev/null");
    run("ip netns exec " + ns(host) + " tc qdisc del dev eth0 root 2>/dev/null");
    if (rate.empty()) return true;
    const std::string tbf = " root tbf rate " + rate + " burst 256kb latency 50ms";
    return run("tc qdisc add dev " + host_veth(host) + tbf) &&
           run("ip netns exec " + ns(host) + " tc qdisc add dev eth0" + tbf);
  }
  /// Runs a shell command line; true on exit status 0 (the output goes to error()).
  bool run(const std::string& cmd) {
    std::string out;
    FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
    if (!p) {
      error_ += "popen failed: " + cmd + "\n";
      return false;
    }
    char buf[512];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    const int st = ::pclose(p);
    if (st != 0) {
      error_ += "`" + cmd + "` failed: " + out;
      return false;
    }
    return true;
  }

 private:
  int index(const std::string& host) const {
    for (size_t i = 0; i < hosts_.size(); ++i)
      if (hosts_[i] == host) return static_cast<int>(i);
    std::fprintf(stderr, "netns lab: no host %s\n", host.c_str());
    std::abort();
  }

  bool setup() {
    if (::geteuid() != 0) {
      error_ = "the multi-host suite needs root (ip netns): run it as root (CI does)";
      return false;
    }
    if (!run("ip link add " + bridge_ + " type bridge") || !run("ip addr add " + bridge_ip() + "/24 dev " + bridge_) ||
        !run("ip link set " + bridge_ + " up"))
      return false;
    created_bridge_ = true;
    for (const auto& h : hosts_) {
      const std::string n = ns(h), v = host_veth(h), peer = v + "p";
      if (!run("ip netns add " + n)) return false;
      created_.push_back(n);
      if (!run("ip link add " + v + " type veth peer name " + peer) || !run("ip link set " + peer + " netns " + n) ||
          !run("ip -n " + n + " link set " + peer + " name eth0") || !run("ip link set " + v + " master " + bridge_) ||
          !run("ip link set " + v + " up") || !run("ip -n " + n + " addr add " + ip(h) + "/24 dev eth0") ||
          !run("ip -n " + n + " link set eth0 up") || !run("ip -n " + n + " link set lo up"))
        return false;
    }
    // Bridged frames must not be filtered by the host's iptables (e.g. Docker's FORWARD DROP).
    run("test ! -e /proc/sys/net/bridge/bridge-nf-call-iptables || sysctl -qw net.bridge.bridge-nf-call-iptables=0");
    return true;
  }

  void teardown() {
    for (const auto& h : hosts_) run("ip link del " + host_veth(h) + " 2>/dev/null || true");
    for (const auto& n : created_) run("ip netns pids " + n + " | xargs -r kill -9; ip netns del " + n);
    created_.clear();
    if (created_bridge_) run("ip link del " + bridge_);
    created_bridge_ = false;
  }

  /// Removes namespaces and bridges of earlier runs (pdmhPID-*) whose process is gone.
  void cleanup_stale() {
    FILE* p = ::popen("ip netns list 2>/dev/null | awk '{print $1}' | grep '^pdmh'; ip -o link show type bridge | awk -F': ' '{print $2}' | grep '^pdmh'", "r");
    if (!p) return;
    char buf[256];
    std::vector<std::string> names;
    while (std::fgets(buf, sizeof buf, p)) {
      std::string s(buf);
      while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
      names.push_back(s);
    }
    ::pclose(p);
    for (const auto& name : names) {
      const int pid = std::atoi(name.c_str() + 4);
      if (pid <= 0 || pid == ::getpid() || ::kill(pid, 0) == 0) continue;
      if (name.find("br") != std::string::npos && name.find('-') == std::string::npos) run("ip link del " + name);
      else run("ip netns pids " + name + " | xargs -r kill -9; ip netns del " + name);
    }
  }

  std::vector<std::string> hosts_;
  std::string tag_, subnet_, bridge_;
  std::vector<std::string> created_;
  bool created_bridge_ = false;
  bool ok_ = false;
  std::string error_;
};

}  // namespace pdserve::testing
