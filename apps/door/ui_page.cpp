#include "ui_page.hpp"

#include <cstddef>

namespace sandboxd::door {

namespace {

// What the page may load: its own script and style sheet, its own API; nothing inline, no
// frames, no plugins, no form posts anywhere (the login form is sent by the script).
constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

}  // namespace

bool is_ui_path(std::string_view path) {
  return path == "/ui" || path.substr(0, 4) == "/ui/";
}

bool is_ui_data_path(std::string_view path) {
  return path.substr(0, 8) == "/ui/api/" || path == "/ui/events";
}

const UiAsset* ui_asset(std::string_view path) {
  for (const UiAsset& asset : ui_assets()) {
    if (asset.path == path) return &asset;
  }
  return nullptr;
}

void add_ui_headers(Response& response) {
  response.headers.emplace_back("Content-Security-Policy", kContentSecurityPolicy);
  response.headers.emplace_back("X-Content-Type-Options", "nosniff");
  response.headers.emplace_back("Referrer-Policy", "no-referrer");
  response.headers.emplace_back("X-Frame-Options", "DENY");
  response.headers.emplace_back("Cache-Control", "no-store");
}

std::optional<Response> ui_asset_response(std::string_view path) {
  const UiAsset* asset = ui_asset(path);
  if (asset == nullptr) return std::nullopt;
  Response response;
  response.content_type = std::string(asset->content_type);
  response.body = std::string(asset->body);
  add_ui_headers(response);
  return response;
}

}  // namespace sandboxd::door
