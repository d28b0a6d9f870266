package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// ErrAddressRefused marks an http_fetch call refused because the address it would
// connect to is not public and not allowed by the configuration.
var ErrAddressRefused = errors.New("address refused")

// ErrNotText marks an http_fetch response whose content is not text.
var ErrNotText = errors.New("the response is not text")

// HTTPFetchConfig configures the http_fetch tool. The zero value reaches public
// addresses only, reads at most 1 MiB of a body and gives up after 30 s.
type HTTPFetchConfig struct {
	// Allow lists what may be reached beyond the public internet: CIDR prefixes
	// ("10.0.0.0/8", "fd00::/8"), single addresses ("192.168.1.20", "::1"), and host
	// names ("intranet.example.com", matched exactly, without a port, case-
	// insensitively: every address the name resolves to is allowed).
	Allow []string
	// MaxBytes bounds the body read, in bytes (default 1 MiB); a longer body is cut
	// with a note saying so.
	MaxBytes int
	// Timeout bounds one call, redirects included (default 30 s).
	Timeout time.Duration
	// MaxRedirects bounds the redirects followed (default 5; negative: none).
	MaxRedirects int
	// UserAgent is sent with each request (default "troupe-http-fetch/1").
	UserAgent string
	// Resolve looks up a host name's addresses (default net.DefaultResolver). Tests
	// inject names that resolve where they need.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
}

// maxFetchHeaderBytes bounds a response's header section; a larger one fails the call.
const maxFetchHeaderBytes = 256 << 10

// Defaults of HTTPFetchConfig.
const (
	DefaultFetchMaxBytes     = 1 << 20
	DefaultFetchTimeout      = 30 * time.Second
	DefaultFetchMaxRedirects = 5
)

// ParseAllow reads an allow list (HTTPFetchConfig.Allow) into prefixes and host
// names; it fails on an entry that is none of a CIDR, an address or a host name.
func ParseAllow(allow []string) (prefixes []netip.Prefix, hosts map[string]bool, err error) {
	hosts = map[string]bool{}
	for _, a := range allow {
		a = strings.TrimSpace(a)
		if p, perr := netip.ParsePrefix(a); perr == nil {
			prefixes = append(prefixes, p.Masked())
			continue
		}
		if ip, perr := netip.ParseAddr(strings.Trim(a, "[]")); perr == nil {
			prefixes = append(prefixes, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
			continue
		}
		if !validHostName(a) {
			return nil, nil, fmt.Errorf("allow entry %q is not a CIDR prefix (10.0.0.0/8), an IP address or a host name", a)
		}
		hosts[strings.ToLower(strings.TrimSuffix(a, "."))] = true
	}
	return prefixes, hosts, nil
}

func validHostName(h string) bool {
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range []byte(label) {
			if !(isLetter(c) || isDigit(c) || c == '-') {
				return false
			}
		}
	}
	return true
}

// blocked are the address ranges http_fetch refuses unless allowed, most specific
// first, each with what it is. IPv4-mapped IPv6 addresses are checked as IPv4.
var blocked = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("169.254.169.254/32"), "a cloud metadata address"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "a cloud metadata address"},
	{netip.MustParsePrefix("0.0.0.0/8"), "an unspecified (this-network) address"},
	{netip.MustParsePrefix("10.0.0.0/8"), "a private address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a carrier-grade NAT address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address"},
	{netip.MustParsePrefix("172.16.0.0/12"), "a private address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "a reserved address"},
	{netip.MustParsePrefix("192.0.2.0/24"), "a documentation address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address"},
	{netip.MustParsePrefix("198.51.100.0/24"), "a documentation address"},
	{netip.MustParsePrefix("203.0.113.0/24"), "a documentation address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved or broadcast address"},
	{netip.MustParsePrefix("::/128"), "an unspecified address"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
	{netip.MustParsePrefix("::/96"), "an IPv4-compatible address"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a local NAT64 address"},
	{netip.MustParsePrefix("100::/64"), "a discard address"},
	{netip.MustParsePrefix("2001::/32"), "a Teredo address"},
	{netip.MustParsePrefix("2001:db8::/32"), "a documentation address"},
	{netip.MustParsePrefix("fc00::/7"), "a private (unique local) address"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local address"},
	{netip.MustParsePrefix("ff00::/8"), "a multicast address"},
}

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// AddressPolicy says which addresses http_fetch may connect to: public ones, and
// those its allow list names.
type AddressPolicy struct {
	prefixes []netip.Prefix
	hosts    map[string]bool
}

// NewAddressPolicy builds the policy of an allow list (HTTPFetchConfig.Allow).
func NewAddressPolicy(allow []string) (*AddressPolicy, error) {
	prefixes, hosts, err := ParseAllow(allow)
	if err != nil {
		return nil, err
	}
	return &AddressPolicy{prefixes: prefixes, hosts: hosts}, nil
}

// AllowsHost reports whether the allow list names host, so that every address it
// resolves to may be reached.
func (p *AddressPolicy) AllowsHost(host string) bool {
	return p.hosts[strings.ToLower(strings.TrimSuffix(host, "."))]
}

// Refuses returns why ip may not be reached ("a loopback address"), or "" when it
// may: it is public, or inside a prefix of the allow list.
func (p *AddressPolicy) Refuses(ip netip.Addr) string {
	ip = ip.Unmap().WithZone("")
	for _, a := range p.prefixes {
		if a.Contains(ip) {
			return ""
		}
	}
	// IPv6 forms that carry an IPv4 address are judged by it.
	if nat64.Contains(ip) || sixToFour.Contains(ip) {
		b := ip.As16()
		var v4 netip.Addr
		if nat64.Contains(ip) {
			v4 = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
		} else {
			v4 = netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})
		}
		if why := p.Refuses(v4); why != "" {
			return why + " (inside an IPv6 address)"
		}
		return ""
	}
	for _, b := range blocked {
		if b.prefix.Contains(ip) {
			return b.what
		}
	}
	return ""
}

// RefusedError is the error of a connection http_fetch refused.
type RefusedError struct {
	Host string     // as the URL names it
	Addr netip.Addr // the address it resolved to
	Why  string     // what the address is: "a loopback address"
}

func (e *RefusedError) Error() string {
	target := e.Addr.String()
	if e.Host != "" && e.Host != target {
		target = fmt.Sprintf("%s (%s)", e.Host, e.Addr)
	}
	return fmt.Sprintf("refused to connect to %s: it is %s; only public addresses are reachable, unless the node's configuration allows more (tools.http_fetch.allow)", target, e.Why)
}

// Is makes errors.Is(err, ErrAddressRefused) hold.
func (e *RefusedError) Is(target error) bool { return target == ErrAddressRefused }

type httpFetchArgs struct {
	URL    string `json:"url" jsonschema:"The http:// or https:// URL to fetch" tool:"minLength=1,maxLength=4096"`
	Method string `json:"method,omitempty" jsonschema:"GET (the default) returns the status, headers and body; HEAD only the status and headers" tool:"enum=GET|HEAD"`
}

// NewHTTPFetch returns the http_fetch tool: it GETs (or HEADs) an http or https URL
// and returns the status line, the content type and the body as text.
//
// It connects only to public addresses unless cfg.Allow says otherwise: loopback,
// private (RFC 1918 and IPv6 unique local), link-local, carrier-grade NAT,
// multicast, unspecified, reserved and documentation ranges, and the cloud metadata
// addresses (169.254.169.254, fd00:ec2::254) are refused, as are IPv6 forms that
// embed such an IPv4 address. The check is made when connecting, on the addresses
// the host name resolved to (every one must be allowed, and the connection is made
// to a checked address, so a name that resolves to a public address once and a
// private one later gains nothing), and again by the dialer's control hook on the
// socket's address; it applies to every redirect, of which at most MaxRedirects are
// followed. Proxies from the environment are not used: a proxy would reach what the
// check refuses.
//
// A body must be text (text/*, JSON, XML, JavaScript, YAML, form data; sniffed when
// no type is given) and hold no NUL byte, whatever its type claims; it is returned
// as UTF-8 (ISO-8859-1 is converted, invalid bytes replaced) and cut at MaxBytes, as
// decoded from gzip, with a note. A body in another Content-Encoding is refused. A non-2xx status is a result, not an
// error: the model reads it.
func NewHTTPFetch(cfg HTTPFetchConfig) (*FuncTool, error) {
	policy, err := NewAddressPolicy(cfg.Allow)
	if err != nil {
		return nil, fmt.Errorf("tools: http_fetch: %w", err)
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultFetchMaxBytes
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultFetchTimeout
	}
	if cfg.MaxRedirects == 0 {
		cfg.MaxRedirects = DefaultFetchMaxRedirects
	} else if cfg.MaxRedirects < 0 {
		cfg.MaxRedirects = 0
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "troupe-http-fetch/1"
	}
	if cfg.Resolve == nil {
		cfg.Resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	f := &fetcher{cfg: cfg, policy: policy}
	transport := &http.Transport{
		Proxy:               nil,
		DialContext:         f.dial,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        16,
		IdleConnTimeout:     30 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
		// Headers are not the body's limit's to bound: the default is 10 MiB.
		MaxResponseHeaderBytes: maxFetchHeaderBytes,
	}
	f.client = &http.Client{Transport: transport, CheckRedirect: f.checkRedirect}
	return Func("http_fetch",
		"Fetches a web page or API response over HTTP(S) and returns its status, content type and text body "+
			"(at most "+strconv.Itoa(cfg.MaxBytes)+" bytes; binary content is refused). Only public addresses are reachable.",
		f.fetch, WithSideEffects(false), WithTimeout(cfg.Timeout), WithMaxOutput(cfg.MaxBytes+4096))
}

type fetcher struct {
	cfg    HTTPFetchConfig
	policy *AddressPolicy
	client *http.Client
}

// dial connects to addr ("host:port") as the policy allows (AddressPolicy.Dial).
func (f *fetcher) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	return f.policy.Dial(ctx, network, addr, f.cfg.Resolve)
}

// Dial connects to addr ("host:port") after checking every address its host
// resolves to (through resolve; an IP address is not resolved): an address the
// policy refuses fails the dial with a *RefusedError, unless the host itself is
// allowed (AllowsHost). The dialer's control hook checks the socket's address
// again, so a name that resolves differently the second time gains nothing. The
// addresses are tried in order until one connects.
func (p *AddressPolicy) Dial(ctx context.Context, network, addr string, resolve func(ctx context.Context, host string) ([]netip.Addr, error)) (net.Conn, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("bad port in %q", addr)
	}
	allowedHost := p.AllowsHost(host)
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else {
		if ips, err = resolve(ctx, host); err != nil {
			return nil, fmt.Errorf("cannot resolve %s: %w", host, err)
		}
		if len(ips) == 0 {
			return nil, fmt.Errorf("%s has no address", host)
		}
	}
	if !allowedHost {
		for _, ip := range ips {
			if why := p.Refuses(ip); why != "" {
				return nil, &RefusedError{Host: host, Addr: ip.Unmap(), Why: why}
			}
		}
	}
	d := net.Dialer{Timeout: 10 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("cannot check the address %q: %w", address, err)
		}
		if why := p.Refuses(ap.Addr()); why != "" && !allowedHost {
			return &RefusedError{Host: host, Addr: ap.Addr().Unmap(), Why: why}
		}
		return nil
	}}
	var errs []error
	for _, ip := range ips {
		conn, err := d.DialContext(ctx, network, netip.AddrPortFrom(ip.Unmap(), uint16(port)).String())
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

func (f *fetcher) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) > f.cfg.MaxRedirects {
		return fmt.Errorf("stopped after %d redirects (the limit), at %s", f.cfg.MaxRedirects, req.URL.Redacted())
	}
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		return fmt.Errorf("refused a redirect to %s: only http and https URLs are fetched", req.URL.Redacted())
	}
	return nil
}

func (f *fetcher) fetch(ctx context.Context, a httpFetchArgs) (string, error) {
	u, err := url.Parse(strings.TrimSpace(a.URL))
	switch {
	case err != nil:
		return "", &ArgumentError{Tool: "http_fetch", Field: "url", Reason: fmt.Sprintf("%q is not a URL: %v", a.URL, err)}
	case u.Scheme != "http" && u.Scheme != "https":
		return "", &ArgumentError{Tool: "http_fetch", Field: "url", Reason: fmt.Sprintf("%q is not an http:// or https:// URL", a.URL)}
	case u.Hostname() == "":
		return "", &ArgumentError{Tool: "http_fetch", Field: "url", Reason: fmt.Sprintf("%q names no host", a.URL)}
	}
	method := a.Method
	if method == "" {
		method = http.MethodGet
	}
	ctx, cancel := context.WithTimeoutCause(ctx, f.cfg.Timeout, fmt.Errorf("http_fetch: no complete response within %s", f.cfg.Timeout))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return "", &ArgumentError{Tool: "http_fetch", Field: "url", Reason: err.Error()}
	}
	req.Header.Set("User-Agent", f.cfg.UserAgent)
	req.Header.Set("Accept", "text/html, text/plain, application/json, application/xml, text/*;q=0.9, */*;q=0.1")
	resp, err := f.client.Do(req)
	if err != nil {
		var refused *RefusedError
		if errors.As(err, &refused) {
			return "", fmt.Errorf("http_fetch: %w", refused)
		}
		if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
			return "", cause
		}
		return "", fmt.Errorf("http_fetch: %s", strings.TrimPrefix(err.Error(), method+" "))
	}
	defer resp.Body.Close()

	var b strings.Builder
	fmt.Fprintf(&b, "HTTP %s\n", resp.Status)
	if final := resp.Request.URL.String(); final != u.String() {
		fmt.Fprintf(&b, "URL: %s\n", resp.Request.URL.Redacted())
	}
	ctype := resp.Header.Get("Content-Type")
	for _, h := range []string{"Content-Type", "Content-Length", "Last-Modified", "Location"} {
		if v := resp.Header.Get(h); v != "" && (h != "Content-Length" || method == http.MethodHead) {
			fmt.Fprintf(&b, "%s: %s\n", h, v)
		}
	}
	if method == http.MethodHead {
		return strings.TrimSuffix(b.String(), "\n"), nil
	}
	// The transport asks for gzip and decodes it (the size limit holds after
	// decoding); any other encoding would hand the model compressed bytes.
	if enc := strings.TrimSpace(resp.Header.Get("Content-Encoding")); enc != "" && !strings.EqualFold(enc, "identity") {
		return "", fmt.Errorf("http_fetch: %w: %s is encoded with %q (Content-Encoding), which http_fetch does not decode", ErrNotText, resp.Request.URL.Redacted(), enc)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(f.cfg.MaxBytes)+1))
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
			return "", cause
		}
		return "", fmt.Errorf("http_fetch: reading the body: %w", err)
	}
	truncated := len(body) > f.cfg.MaxBytes
	if truncated {
		body = body[:f.cfg.MaxBytes]
	}
	if ctype == "" {
		ctype = http.DetectContentType(body)
	}
	mediaType, params, _ := mime.ParseMediaType(ctype)
	if !isTextType(mediaType) {
		return "", fmt.Errorf("http_fetch: %w: %s is %q; http_fetch returns text only", ErrNotText, resp.Request.URL.Redacted(), mediaType)
	}
	// A type is the server's word: a body that holds NUL bytes is binary whatever
	// it claims (as the files tool judges a file).
	if bytes.IndexByte(body, 0) >= 0 {
		return "", fmt.Errorf("http_fetch: %w: %s claims to be %q but holds NUL bytes: it is binary; http_fetch returns text only", ErrNotText, resp.Request.URL.Redacted(), mediaType)
	}
	if truncated && !isLatin1(params["charset"]) {
		body = cutPartialRune(body)
	}
	text := decodeText(body, params["charset"])
	b.WriteString("\n")
	b.WriteString(text)
	if truncated {
		if n := resp.ContentLength; n > 0 {
			fmt.Fprintf(&b, "\n[truncated: %d bytes, showing the first %d]", n, len(body))
		} else {
			fmt.Fprintf(&b, "\n[truncated: more than %d bytes, showing the first %d]", f.cfg.MaxBytes, len(body))
		}
	}
	return b.String(), nil
}

// isTextType reports whether a media type is text a model can read.
func isTextType(t string) bool {
	switch {
	case strings.HasPrefix(t, "text/"), strings.HasSuffix(t, "+json"), strings.HasSuffix(t, "+xml"):
		return true
	}
	switch t {
	case "application/json", "application/xml", "application/javascript", "application/ecmascript",
		"application/x-javascript", "application/x-ndjson", "application/yaml", "application/x-yaml",
		"application/toml", "application/x-www-form-urlencoded", "application/graphql", "application/sql",
		"image/svg+xml":
		return true
	}
	return false
}

// decodeText returns body as UTF-8: ISO-8859-1 (and its common names) converted, any
// other charset read as UTF-8 with invalid bytes replaced.
func decodeText(body []byte, charset string) string {
	if isLatin1(charset) {
		r := make([]rune, len(body))
		for i, c := range body {
			r[i] = rune(c)
		}
		return string(r)
	}
	return strings.ToValidUTF8(string(body), "\uFFFD")
}

func isLatin1(charset string) bool {
	switch strings.ToLower(strings.TrimSpace(charset)) {
	case "iso-8859-1", "latin1", "iso8859-1", "l1", "latin-1":
		return true
	}
	return false
}

// cutPartialRune drops the bytes of a UTF-8 character cut at the end of b.
func cutPartialRune(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			break
		}
	}
	return b
}
