package node

import (
	"cmp"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"path/filepath"
	"slices"
	"strings"

	"github.com/troupe-run/troupe/internal/lockpid"
)

// StartingRetryAfter is the Retry-After, in seconds, of the 503 a node that is
// starting answers (StartingHandler).
const StartingRetryAfter = "1"

// StartingHandler answers the node's HTTP API while New, given cfg, has not
// returned yet: a server listens first (so that a node started by mistake on the
// address another serves fails at once), and New may wait up to Config.LockWait
// for a lock of the data directory that another process holds (the node before
// it, still stopping). Meanwhile GET /livez answers 200 (the process is alive: a
// restart cures nothing, and one that a liveness probe got by timing out would
// start the wait again), GET /healthz 503 with the reason, "the node is
// starting: waiting for the data lock held by pid N (PATH)" when another live
// process holds one, and every other request 503 with the same reason and a
// Retry-After. On a node with API tokens (HTTPConfig.Auth) only a request that
// carries one of them is told the holder and the lock file: any other is told
// "waiting for the data lock", as the public /healthz tells every client, for a
// pid and a path of the server's disk are the operator's to know.
func StartingHandler(cfg Config) http.Handler {
	closed, hashes := startingTokens(cfg.HTTP.Auth)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		detail := !closed || bearerIn(r, hashes)
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			switch r.URL.Path {
			case "/livez":
				writeHealth(w, nil)
				return
			case "/healthz":
				w.Header().Set("Retry-After", StartingRetryAfter)
				writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unhealthy", "reason": startingReason(cfg, detail)})
				return
			}
		}
		w.Header().Set("Retry-After", StartingRetryAfter)
		writeError(w, http.StatusServiceUnavailable, "%s: try again in a moment", startingReason(cfg, detail))
	})
}

// startingTokens reports whether auth closes the API (it names a token or a
// tokens file), and the SHA-256 hashes of its tokens (a tokens file that cannot
// be read adds none: the API stays closed, as New would refuse to open it).
func startingTokens(auth AuthConfig) (closed bool, hashes [][sha256.Size]byte) {
	tokens := slices.Clone(auth.Tokens)
	if auth.TokensFile != "" {
		more, _ := ReadTokensFile(auth.TokensFile)
		tokens = append(tokens, more...)
	}
	for _, t := range tokens {
		hashes = append(hashes, sha256.Sum256([]byte(t)))
	}
	return len(auth.Tokens) > 0 || auth.TokensFile != "", hashes
}

// bearerIn reports whether r carries "Authorization: Bearer TOKEN" with a token
// whose hash is among hashes.
func bearerIn(r *http.Request, hashes [][sha256.Size]byte) bool {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(token)))
	found := false
	for _, h := range hashes {
		found = subtle.ConstantTimeCompare(sum[:], h[:]) == 1 || found
	}
	return found
}

// startingReason says why a node is not serving yet: the lock New waits for, if
// another live process holds one of the data directory's (the event log's, the
// memory and knowledge vectors'), as its lock file names it when detail is set;
// without, only that it waits for one.
func startingReason(cfg Config, detail bool) string {
	dir := cmp.Or(cfg.DataDir, ".troupe") // New's default (setDefaults)
	cluster := cfg.Bus != nil
	for _, path := range []string{
		filepath.Join(dir, "LOCK"),
		MemoryVectorsPath(dir, cluster, cfg.NodeID) + ".lock",
		KnowledgeVectorsPath(dir, cluster, cfg.NodeID) + ".lock",
	} {
		if h := lockpid.Read(path); h.PID > 0 && !h.This() && h.Live() {
			if !detail {
				return "the node is starting: waiting for the data lock"
			}
			return "the node is starting: waiting for the data lock held by " + h.String() + " (" + path + ")"
		}
	}
	return "the node is starting"
}
