// The operator's live view (design "The operator's live view"): what serve and
// sandboxd-provisioner share of it. The page itself (apps/door/ui/: one HTML file, one script,
// one style sheet, hand-written, nothing fetched from elsewhere) is embedded in the binary at
// build time and served on GET /ui, /ui/app.js, /ui/app.css and /ui/favicon.svg, open to
// anyone: it holds no
// data. Its data comes from /ui/api/* routes behind a session the daemon opens at POST
// /ui/login (the daemon's credential in the Authorization header, checked before any body byte
// like every other route's; ui_sessions.hpp): the session's cookie is HttpOnly, so no script
// reads it; SameSite=Strict, so no other site's page sends it; Path=/ui; and it holds a random
// value of the daemon's, never the credential. The page never puts the credential in a URL.
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

// Whether `path` is the page's ("/ui" or below it).
bool is_ui_path(std::string_view path);
// Whether `path` is one of the page's data routes (/ui/api/*, /ui/events): the only ones its
// session's cookie opens.
bool is_ui_data_path(std::string_view path);

// The headers of every /ui answer: the policy, no sniffing, no referrer, no caching, no
// framing.
void add_ui_headers(Response& response);

// GET of an embedded file: 200 with it, or nullopt when `path` names none.
std::optional<Response> ui_asset_response(std::string_view path);

}  // namespace sandboxd::door
