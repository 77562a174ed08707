// The operator's live view (issue 36; DESIGN.md "The operator's live view"): what serve and
// sandboxd-provisioner share of it. The page itself (apps/door/ui/: one HTML file, one script,
// one style sheet, hand-written, nothing fetched from elsewhere) is embedded in the binary at
// build time and served on GET /ui, /ui/app.js, /ui/app.css and /ui/favicon.svg, open to
// anyone: it holds no
// data. Its data comes from /ui/api/* routes behind the daemon's own credential, which a
// browser presents as a cookie the page gets from POST /ui/login (the credential in the
// Authorization header, checked before any body byte like every other route's): HttpOnly, so
// no script reads it; SameSite=Strict, so no other site's page sends it; Path=/ui, so the
// control API never takes it. The page never puts the credential in a URL.
//
// Every /ui answer carries a Content-Security-Policy that allows only this daemon's own script
// and style sheet (no inline script, no eval, no frames, no form posts elsewhere); the script
// puts every string it gets as text, never as markup.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "http_door.hpp"

namespace sandboxd::door {

struct UiAsset {
  std::string_view path;  // "/ui", "/ui/app.js", "/ui/app.css", "/ui/favicon.svg"
  std::string_view content_type;
  std::string_view body;
};

// Every embedded file (ui_assets.cpp, generated): the routes a daemon serves the page on.
std::span<const UiAsset> ui_assets();
// The one served at `path`; nullptr when none.
const UiAsset* ui_asset(std::string_view path);

inline constexpr std::string_view kUiCookieName = "sandboxd_ui";

// Whether `path` is the page's ("/ui" or below it).
bool is_ui_path(std::string_view path);
// Whether `path` is one of the page's data routes (/ui/api/*, /ui/events): the only ones its
// cookie stands for the daemon's credential on.
bool is_ui_data_path(std::string_view path);

// The headers of every /ui answer: the policy, no sniffing, no referrer, no caching, no
// framing.
void add_ui_headers(Response& response);

// GET of an embedded file: 200 with it, or nullopt when `path` names none.
std::optional<Response> ui_asset_response(std::string_view path);

// POST /ui/login's answer, once the daemon has checked the credential: 204 setting the cookie
// that holds it (hex-encoded, so any byte a token may hold survives a cookie).
Response ui_login_response(std::string_view credential);
// POST /ui/logout's answer: 204 expiring the cookie.
Response ui_logout_response();

// The credential the page's cookie carries on one of its data routes; nullopt when there is
// none, it is not ours (not hex, or over 4 KiB), or the path is not a data route: neither the
// control API nor the log-in takes the cookie.
std::optional<std::string> ui_cookie_credential(const RequestHead& head);

}  // namespace sandboxd::door
