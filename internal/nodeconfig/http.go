package nodeconfig

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/troupe-run/troupe/node"
)

// The HTTP API's protection in the configuration file (node serve):
//
//	"auth": {"tokens": ["..."], "tokens_file": "/etc/troupe/tokens", "rate": 20, "burst": 40,
//	         "session_ttl": "12h"},
//	"cors": {"origins": ["https://app.example"]},
//	"http_limits": {"read_header_timeout": "10s", "read_timeout": "30s", "write_timeout": "30s",
//	                "idle_timeout": "2m", "min_body_rate": 65536, "max_body_time": "10m",
//	                "max_body": 1048576, "max_conns": 4096},
//	"trusted_proxies": ["10.0.0.0/8"]
//
// The flags and the environment (cmd/node) override each field.

// AuthFile is the "auth" section (node.AuthConfig).
type AuthFile struct {
	Tokens     []string `json:"tokens"`
	TokensFile string   `json:"tokens_file"`
	Rate       float64  `json:"rate"`
	Burst      int      `json:"burst"`
	// SessionTTL is how long a dashboard login lasts (a Go duration, 1m to 720h;
	// default node.DefaultSessionTTL).
	SessionTTL string `json:"session_ttl"`
}

// Bounds of auth.session_ttl.
const (
	minSessionTTL = time.Minute
	maxSessionTTL = 30 * 24 * time.Hour
)

// CORSFile is the "cors" section (node.CORSConfig).
type CORSFile struct {
	Origins []string `json:"origins"`
}

// HTTPLimitsFile is the "http_limits" section: the HTTP server's timeouts (Go
// durations), the default request body bound in bytes and the connections served
// at once (node.HTTPConfig).
type HTTPLimitsFile struct {
	ReadHeaderTimeout string `json:"read_header_timeout"`
	ReadTimeout       string `json:"read_timeout"`
	WriteTimeout      string `json:"write_timeout"`
	IdleTimeout       string `json:"idle_timeout"`
	// MinBodyRate is node.HTTPConfig.MinBodyRate in bytes a second, MaxBodyTime
	// its MaxBodyTime (a Go duration).
	MinBodyRate int64  `json:"min_body_rate"`
	MaxBodyTime string `json:"max_body_time"`
	MaxBody     int64  `json:"max_body"`
	MaxConns    int    `json:"max_conns"`
}

// Bounds of the http_limits section.
const (
	minHTTPTimeout = 100 * time.Millisecond
	maxHTTPTimeout = time.Hour
	maxMaxBody     = 1 << 30
)

// HTTPConfig is the node's HTTPConfig from the auth, cors and http_limits sections
// and trusted_proxies (valid: Validate checked them).
func (fc File) HTTPConfig() node.HTTPConfig {
	var c node.HTTPConfig
	if a := fc.Auth; a != nil {
		c.Auth = node.AuthConfig{Tokens: a.Tokens, TokensFile: a.TokensFile, Rate: a.Rate, Burst: a.Burst}
		if a.SessionTTL != "" {
			c.Auth.SessionTTL, _ = time.ParseDuration(a.SessionTTL)
		}
	}
	if fc.CORS != nil {
		c.CORS.Origins = fc.CORS.Origins
	}
	c.TrustedProxies = fc.TrustedProxies
	if l := fc.HTTPLimits; l != nil {
		for _, f := range []struct {
			s string
			d *time.Duration
		}{{l.ReadHeaderTimeout, &c.ReadHeaderTimeout}, {l.ReadTimeout, &c.ReadTimeout}, {l.WriteTimeout, &c.WriteTimeout}, {l.IdleTimeout, &c.IdleTimeout}, {l.MaxBodyTime, &c.MaxBodyTime}} {
			if f.s != "" {
				*f.d, _ = time.ParseDuration(f.s)
			}
		}
		c.MaxBody, c.MaxConnections, c.MinBodyRate = l.MaxBody, l.MaxConns, l.MinBodyRate
	}
	return c
}

// validateHTTP checks the auth, cors and http_limits sections and trusted_proxies. No error quotes a
// token.
func (fc File) validateHTTP() []error {
	var errs []error
	if a := fc.Auth; a != nil {
		if err := (node.AuthConfig{Tokens: a.Tokens, Rate: a.Rate, Burst: a.Burst}).Validate(); err != nil {
			errs = append(errs, fmt.Errorf("auth: %w", err))
		}
		if a.SessionTTL != "" {
			if err := checkDuration(a.SessionTTL, minSessionTTL, maxSessionTTL); err != nil {
				errs = append(errs, fmt.Errorf("auth.session_ttl: %w", err))
			}
		}
	}
	if fc.CORS != nil {
		if err := (node.CORSConfig{Origins: fc.CORS.Origins}).Validate(); err != nil {
			errs = append(errs, fmt.Errorf("cors: %w", err))
		}
	}
	if err := (node.HTTPConfig{TrustedProxies: fc.TrustedProxies}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("trusted_proxies: %w", err))
	}
	if l := fc.HTTPLimits; l != nil {
		for field, v := range map[string]string{"read_header_timeout": l.ReadHeaderTimeout, "read_timeout": l.ReadTimeout,
			"write_timeout": l.WriteTimeout, "idle_timeout": l.IdleTimeout, "max_body_time": l.MaxBodyTime} {
			if v == "" {
				continue
			}
			if err := checkDuration(v, minHTTPTimeout, maxHTTPTimeout); err != nil {
				errs = append(errs, fmt.Errorf("http_limits.%s: %w", field, err))
			}
		}
		if l.MinBodyRate < 0 || l.MinBodyRate > maxMaxBody {
			errs = append(errs, fmt.Errorf("http_limits.min_body_rate: %d is out of range: want 1 to %d bytes a second (0 or absent: %d)", l.MinBodyRate, maxMaxBody, node.DefaultMinBodyRate))
		}
		if l.ReadTimeout != "" && l.MaxBodyTime != "" {
			rt, err1 := time.ParseDuration(l.ReadTimeout)
			mt, err2 := time.ParseDuration(l.MaxBodyTime)
			if err1 == nil && err2 == nil && mt < rt {
				errs = append(errs, fmt.Errorf("http_limits.max_body_time: %s is shorter than read_timeout %s", l.MaxBodyTime, l.ReadTimeout))
			}
		}
		if l.MaxBody < 0 || l.MaxBody > maxMaxBody {
			errs = append(errs, fmt.Errorf("http_limits.max_body: %d is out of range: want 1 to %d bytes (0 or absent: %d)", l.MaxBody, maxMaxBody, node.DefaultMaxBody))
		}
		if l.MaxConns < 0 || l.MaxConns > 1<<20 {
			errs = append(errs, fmt.Errorf("http_limits.max_conns: %d is out of range: want 1 to %d (0 or absent: %d)", l.MaxConns, 1<<20, node.DefaultMaxConnections))
		}
	}
	return errs
}

// unknownHTTPField names an unknown field of the auth, cors or http_limits section.
func unknownHTTPField(top map[string]json.RawMessage, name string) error {
	for section, fields := range map[string]string{"auth": jsonFields[AuthFile](), "cors": jsonFields[CORSFile](), "http_limits": jsonFields[HTTPLimitsFile]()} {
		var m map[string]json.RawMessage
		_ = json.Unmarshal(top[section], &m)
		if _, ok := m[name]; ok {
			return fmt.Errorf("unknown field \"%s.%s\": the %s fields are %s", section, name, section, fields)
		}
	}
	return nil
}
