package node

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

// The web dashboard: plain HTML, CSS and JavaScript modules in node/ui, embedded in
// the binary and served at /ui/ (a single page with hash routes: sessions, a
// session's timeline, charts, approvals). It holds no data of its own: the page
// calls the node's JSON API (/v1/sessions, /v1/sessions/{id}/events and /stream,
// /v1/approvals, /v1/stats) from the browser; when the API answers 401 it asks for
// a token and logs in with it (POST /v1/auth/login), and its calls are then signed
// in by the session cookie (uisession.go). Everything it renders from the API is
// set as text, never parsed as HTML: model output and tool results are untrusted.

//go:embed ui
var uiFiles embed.FS

// uiCSP is the Content-Security-Policy of every /ui/ answer: scripts, styles and
// API calls from the node only; no inline script or style, no plugin, no framing,
// no form posted elsewhere.
const uiCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// uiTypes are the content types of the dashboard's files, by extension.
var uiTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
	".png":  "image/png",
}

// uiAsset is one embedded file of the dashboard.
type uiAsset struct {
	body  []byte
	ctype string
	etag  string
}

// uiRoutes are the dashboard's routes: GET /ui/ and the files under it, a
// redirect of /ui to /ui/, and the login (uisession.go) that trades a token for a
// session cookie and the logout that ends it. The files are public (the data is
// not: the page's API calls are signed in by the cookie).
func (n *Node) uiRoutes() []Route {
	h := newUIHandler()
	apiErr := func(code int, desc string) Response { return Response{code, desc, jsonBody(apiError{})} }
	return []Route{
		{Method: "GET", Path: "/ui/", Handler: h, Doc: RouteDoc{Summary: "The web dashboard (HTML, scripts and styles embedded in the binary)"}},
		{Method: "GET", Path: "/ui", Handler: http.RedirectHandler("/ui/", http.StatusMovedPermanently), Doc: RouteDoc{Summary: "Redirects to /ui/"}},
		{Method: "POST", Path: "/v1/auth/login", Handler: http.HandlerFunc(n.gate.login), MaxBody: loginMaxBody, Doc: RouteDoc{
			Summary: "Log the dashboard in: one of the node's tokens for a session cookie (" + SessionCookie + ", HttpOnly, SameSite=Strict) and the csrf value " +
				"that state-changing requests signed in by the cookie carry in " + CSRFHeader + " (the " + CSRFCookie + " cookie holds it too)",
			Body: jsonBody(loginBody{}),
			Responses: []Response{ok("logged in: the cookies are set", LoginAnswer{}),
				apiErr(http.StatusUnauthorized, "the token is not one of the node's"),
				apiErr(http.StatusForbidden, "the request comes from another site's page (Sec-Fetch-Site)"),
				apiErr(http.StatusConflict, "the node has no tokens: its API is open"),
				apiErr(http.StatusUnsupportedMediaType, "the body is not application/json"),
				{http.StatusTooManyRequests, "too many login attempts from this client address: retry after Retry-After seconds", jsonBody(apiError{})},
				apiErr(http.StatusServiceUnavailable, "the sign-in could not be recorded in the event log")}}},
		{Method: "POST", Path: "/v1/auth/logout", Handler: http.HandlerFunc(n.gate.logout), Doc: RouteDoc{
			Summary: "Log the dashboard out: end the session of the cookie, on every node over the event log, and clear the cookies",
			Responses: []Response{{http.StatusNoContent, "logged out", nil}, apiErr(http.StatusForbidden, "signed in by the cookie without the csrf value"),
				apiErr(http.StatusServiceUnavailable, "the logout could not be recorded in the event log: the session goes on and the cookies stay")}}},
	}
}

// uiHandler serves the embedded dashboard.
type uiHandler struct {
	assets map[string]uiAsset // by path under /ui/, "" being index.html
}

// newUIHandler reads the embedded files once; an unreadable embedded file is a
// build error, so it panics.
func newUIHandler() *uiHandler {
	h := &uiHandler{assets: map[string]uiAsset{}}
	err := fs.WalkDir(uiFiles, "ui", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		ctype, ok := uiTypes[path.Ext(p)]
		if !ok {
			return nil // not served
		}
		b, err := uiFiles.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		h.assets[strings.TrimPrefix(p, "ui/")] = uiAsset{body: b, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	if err != nil {
		panic("node: the embedded dashboard cannot be read: " + err.Error())
	}
	h.assets[""] = h.assets["index.html"]
	return h
}

func (h *uiHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", uiCSP)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	a, ok := h.assets[strings.TrimPrefix(r.URL.Path, "/ui/")]
	if !ok {
		hd.Set("Cache-Control", "no-store")
		http.Error(w, "404 page not found", http.StatusNotFound)
		return
	}
	// The files' names carry no version: browsers keep them, and ask again each
	// time (If-None-Match), so that a new binary's dashboard is seen at once.
	hd.Set("Content-Type", a.ctype)
	hd.Set("Cache-Control", "no-cache")
	hd.Set("ETag", a.etag)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
}
