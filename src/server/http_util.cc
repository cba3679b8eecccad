#include "server/http_util.h"

namespace pdserve::server {

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& err) {
  res.status = err.status;
  res.set_content(err.body(), "application/json");
}

}  // namespace pdserve::server
