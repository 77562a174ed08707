// The doors' route table (apps/door/route_table.hpp): matching, parameters, labels, the
// unmatched answers and the open routes, without a server.
#include "route_table.hpp"

#include <gtest/gtest.h>

#include <stdexcept>

namespace sandboxd::door {
namespace {

Request request(std::string method, std::string path) {
  Request r;
  r.head.method = std::move(method);
  r.head.path = std::move(path);
  r.head.target = r.head.path;
  return r;
}

Response text(std::string body) {
  Response response;
  response.body = std::move(body);
  return response;
}

std::string header(const Response& response, const std::string& name) {
  for (const auto& [key, value] : response.headers) {
    if (key == name) return value;
  }
  return "";
}

RouteTable sandbox_routes() {
  RouteTable table([](int status, const std::string& message) {
    Response response;
    response.status = status;
    response.body = message;
    return response;
  });
  table.add(
      "GET", "/v1/health", [](const Request&, const RouteParams&) { return text("ok"); },
      RouteTable::Access::open);
  table.add("GET", "/v1/sandboxes",
            [](const Request&, const RouteParams&) { return text("list"); });
  table.add("GET", "/v1/sandboxes/{id}",
            [](const Request&, const RouteParams& p) { return text("get " + p["id"]); });
  table.add("DELETE", "/v1/sandboxes/{id}",
            [](const Request&, const RouteParams& p) { return text("destroy " + p["id"]); });
  table.add("POST", "/v1/sandboxes/{id}/release",
            [](const Request&, const RouteParams& p) { return text("release " + p["id"]); });
  table.add("POST", "/v1/sandboxes/{id}/egress/{verb}",
            [](const Request&, const RouteParams& p) { return text(p["verb"] + " " + p["id"]); });
  return table;
}

TEST(RouteTableTest, AMatchGetsItsParametersAndIsNamedByItsPattern) {
  const RouteTable table = sandbox_routes();
  Response answer = table.dispatch(request("GET", "/v1/sandboxes/abc123"));
  EXPECT_EQ(answer.status, 200);
  EXPECT_EQ(answer.body, "get abc123");
  EXPECT_EQ(answer.route, "/v1/sandboxes/{id}");
  answer = table.dispatch(request("POST", "/v1/sandboxes/abc123/release"));
  EXPECT_EQ(answer.body, "release abc123");
  EXPECT_EQ(answer.route, "/v1/sandboxes/{id}/release");
  answer = table.dispatch(request("POST", "/v1/sandboxes/s1/egress/decide"));
  EXPECT_EQ(answer.body, "decide s1");
  EXPECT_EQ(answer.route, "/v1/sandboxes/{id}/egress/{verb}");
  EXPECT_EQ(table.dispatch(request("DELETE", "/v1/sandboxes/x")).body, "destroy x");
}

TEST(RouteTableTest, AParameterTakesOneNonEmptySegmentOnly) {
  const RouteTable table = sandbox_routes();
  for (const char* path : {"/v1/sandboxes/", "/v1/sandboxes/a/b", "/v1/sandboxes//release",
                           "/v1/sandboxes/a/release/", "/v1/health/", "/v1", "", "v1/health"}) {
    const Response answer = table.dispatch(request("GET", path));
    EXPECT_EQ(answer.status, 404) << path;
    EXPECT_EQ(answer.route, "") << path << ": a made-up path is never a label";
  }
}

TEST(RouteTableTest, AnUnknownPathIs404AndAKnownOneWithAnotherMethodIs405WithAllow) {
  const RouteTable table = sandbox_routes();
  Response answer = table.dispatch(request("GET", "/nothing"));
  EXPECT_EQ(answer.status, 404);
  EXPECT_EQ(answer.body, "no route GET /nothing");
  EXPECT_EQ(header(answer, "Allow"), "");

  answer = table.dispatch(request("PUT", "/v1/sandboxes/abc"));
  EXPECT_EQ(answer.status, 405);
  EXPECT_EQ(header(answer, "Allow"), "GET, DELETE");
  EXPECT_EQ(answer.body, "/v1/sandboxes/abc takes GET, DELETE, not PUT");
  EXPECT_EQ(answer.route, "/v1/sandboxes/{id}") << "a known path's label is its pattern";

  answer = table.dispatch(request("GET", "/v1/sandboxes/abc/release"));
  EXPECT_EQ(answer.status, 405);
  EXPECT_EQ(header(answer, "Allow"), "POST");
}

TEST(RouteTableTest, OnlyRoutesAddedOpenAreOpenAndOnlyForTheirMethod) {
  const RouteTable table = sandbox_routes();
  RequestHead head;
  head.method = "GET";
  head.path = "/v1/health";
  EXPECT_TRUE(table.is_open(head));
  head.method = "POST";
  EXPECT_FALSE(table.is_open(head));
  head.method = "GET";
  head.path = "/v1/sandboxes";
  EXPECT_FALSE(table.is_open(head));
  head.path = "/v1/health/x";
  EXPECT_FALSE(table.is_open(head));
}

TEST(RouteTableTest, PatternsAreListedOnceInOrder) {
  const RouteTable table = sandbox_routes();
  EXPECT_EQ(
      table.patterns(),
      (std::vector<std::string>{"/v1/health", "/v1/sandboxes", "/v1/sandboxes/{id}",
                                "/v1/sandboxes/{id}/release", "/v1/sandboxes/{id}/egress/{verb}"}));
}

TEST(RouteTableTest, ABadPatternIsRefusedNamingIt) {
  RouteTable table([](int, const std::string&) { return Response{}; });
  const auto handler = [](const Request&, const RouteParams&) { return Response{}; };
  table.add("GET", "/a/{id}", handler);
  const auto refused = [&](const std::string& method, const std::string& pattern) {
    try {
      table.add(method, pattern, handler);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refused("GET", "a/b"), "route GET a/b: a pattern starts with '/'");
  EXPECT_EQ(refused("GET", "/a/{}"), "route GET /a/{}: '{}' is not a {name} segment");
  EXPECT_EQ(refused("GET", "/a/{id"), "route GET /a/{id: '{id' is not a {name} segment");
  EXPECT_EQ(refused("GET", "/a/x{id}"), "route GET /a/x{id}: 'x{id}' is not a {name} segment");
  EXPECT_EQ(refused("GET", "/{id}/{id}"), "route GET /{id}/{id}: the parameter {id} is repeated");
  EXPECT_EQ(refused("GET", "/a/{id}"), "route GET /a/{id}: already routed");
  EXPECT_EQ(refused("POST", "/a/{id}"), "accepted");
}

TEST(RouteTableTest, AskingForAParameterThePatternLacksNamesIt) {
  RouteTable table([](int, const std::string&) { return Response{}; });
  table.add("GET", "/a/{id}", [](const Request&, const RouteParams& p) { return text(p["name"]); });
  try {
    table.dispatch(request("GET", "/a/1"));
    FAIL() << "expected std::out_of_range";
  } catch (const std::out_of_range& e) {
    EXPECT_STREQ(e.what(), "the route has no parameter {name}");
  }
}

}  // namespace
}  // namespace sandboxd::door
