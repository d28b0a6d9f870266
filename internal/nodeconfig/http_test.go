package nodeconfig_test

import (
	"strings"
	"testing"
	"time"
)

// The auth, cors and http_limits sections are read into the node's HTTPConfig, and
// a bad value is named by its field, without quoting a token.
func TestHTTPSectionsAreReadAndChecked(t *testing.T) {
	fc, err := loadString(t, `{"auth": {"tokens": ["tok-0123456789abcdef"], "tokens_file": "/etc/troupe/tokens", "rate": 20, "burst": 40, "session_ttl": "8h"},
		"cors": {"origins": ["https://app.example"]},
		"http_limits": {"read_header_timeout": "5s", "read_timeout": "20s", "write_timeout": "1m", "idle_timeout": "3m", "min_body_rate": 8192, "max_body_time": "5m", "max_body": 4096, "max_conns": 100},
		"trusted_proxies": ["10.0.0.0/8", "192.0.2.7"]}`)
	if err != nil {
		t.Fatal(err)
	}
	c := fc.HTTPConfig()
	if len(c.Auth.Tokens) != 1 || c.Auth.TokensFile != "/etc/troupe/tokens" || c.Auth.Rate != 20 || c.Auth.Burst != 40 || c.Auth.SessionTTL != 8*time.Hour ||
		len(c.CORS.Origins) != 1 || c.ReadHeaderTimeout != 5*time.Second || c.ReadTimeout != 20*time.Second ||
		c.WriteTimeout != time.Minute || c.IdleTimeout != 3*time.Minute || c.MaxBody != 4096 || c.MaxConnections != 100 ||
		c.MinBodyRate != 8192 || c.MaxBodyTime != 5*time.Minute ||
		len(c.TrustedProxies) != 2 || c.TrustedProxies[0] != "10.0.0.0/8" {
		t.Fatalf("HTTPConfig: %+v", c)
	}
	for body, want := range map[string]string{
		`{"auth": {"tokens": ["hunter2"]}}`:                               "auth: auth token 1",
		`{"auth": {"rate": -1}}`:                                          "auth rate",
		`{"auth": {"session_ttl": "1s"}}`:                                 "auth.session_ttl",
		`{"auth": {"token": ["tok-0123456789abcdef"]}}`:                   `"auth.token"`,
		`{"cors": {"origins": ["*"]}}`:                                    "cors: cors origin",
		`{"http_limits": {"read_timeout": "forever"}}`:                    "http_limits.read_timeout",
		`{"http_limits": {"idle_timeout": "1ns"}}`:                        "http_limits.idle_timeout",
		`{"http_limits": {"max_body": -5}}`:                               "http_limits.max_body",
		`{"http_limits": {"min_body_rate": -1}}`:                          "http_limits.min_body_rate",
		`{"http_limits": {"max_body_time": "soon"}}`:                      "http_limits.max_body_time",
		`{"http_limits": {"read_timeout": "1m", "max_body_time": "30s"}}`: "http_limits.max_body_time",
		`{"http_limits": {"max_conns": -1}}`:                              "http_limits.max_conns",
		`{"trusted_proxies": ["10.0.0.0/33"]}`:                            "trusted_proxies: trusted proxy",
	} {
		_, err := loadString(t, body)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: %v, want an error naming %s (and no token)", body, err, want)
		}
	}
}
