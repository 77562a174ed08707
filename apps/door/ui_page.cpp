#include "ui_page.hpp"

#include <cstddef>

namespace sandboxd::door {

namespace {

// What the page may load: its own script and style sheet, its own API; nothing inline, no
// frames, no plugins, no form posts anywhere (the login form is sent by the script).
constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

// A cookie value over this is not ours (our tokens are far shorter; a browser keeps 4 KiB).
constexpr std::size_t kMaxCookieValueBytes = 4096;

constexpr char kHexDigits[] = "0123456789abcdef";

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

Response no_content() {
  Response response;
  response.status = 204;
  response.content_type.clear();
  add_ui_headers(response);
  return response;
}

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

Response ui_login_response(std::string_view credential) {
  std::string value;
  value.reserve(credential.size() * 2);
  for (const unsigned char byte : credential) {
    value += kHexDigits[byte >> 4];
    value += kHexDigits[byte & 0x0f];
  }
  Response response = no_content();
  response.headers.emplace_back("Set-Cookie", std::string(kUiCookieName) + "=" + value +
                                                  "; Path=/ui; HttpOnly; SameSite=Strict");
  return response;
}

Response ui_logout_response() {
  Response response = no_content();
  response.headers.emplace_back(
      "Set-Cookie",
      std::string(kUiCookieName) + "=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0");
  return response;
}

std::optional<std::string> ui_cookie_credential(const RequestHead& head) {
  if (!is_ui_data_path(head.path)) return std::nullopt;
  std::string_view cookies = head.header("cookie");
  while (!cookies.empty()) {
    const std::size_t end = std::min(cookies.find(';'), cookies.size());
    std::string_view pair = cookies.substr(0, end);
    cookies.remove_prefix(std::min(end + 1, cookies.size()));
    while (!pair.empty() && pair.front() == ' ') pair.remove_prefix(1);
    const std::size_t equals = pair.find('=');
    if (equals == std::string_view::npos || pair.substr(0, equals) != kUiCookieName) continue;
    const std::string_view value = pair.substr(equals + 1);
    if (value.empty() || value.size() % 2 != 0 || value.size() > kMaxCookieValueBytes) {
      return std::nullopt;
    }
    std::string credential;
    credential.reserve(value.size() / 2);
    for (std::size_t at = 0; at < value.size(); at += 2) {
      const int high = hex_value(value[at]);
      const int low = hex_value(value[at + 1]);
      if (high < 0 || low < 0) return std::nullopt;
      credential += static_cast<char>(high * 16 + low);
    }
    return credential;
  }
  return std::nullopt;
}

}  // namespace sandboxd::door
