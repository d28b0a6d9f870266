package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// secretName matches the names of settings, environment variables and URL query
// parameters whose values are secrets: API_KEY, X-Api-Key, access_token,
// DB_PASSWORD, client_secret, ...
var secretName = regexp.MustCompile(`(?i)(key|token|secret|passw|auth|credential|private)`)

// SecretName reports whether a setting, an environment variable or a URL query
// parameter named name holds a secret, by its name: names with key, token, secret,
// passw(ord), auth, credential or private in them, in any case. Others
// (NODE_ENV=production) do not: redacting their values would blank out common words.
func SecretName(name string) bool { return secretName.MatchString(name) }

// HeaderSecrets returns the secrets of an HTTP header's value: the value itself and,
// for a value with a scheme ("Bearer <token>", "Token <token>", "Basic <base64>"),
// the credential after it, which an echo may show alone.
func HeaderSecrets(value string) []string {
	out := []string{value}
	if _, cred, ok := strings.Cut(strings.TrimSpace(value), " "); ok {
		out = append(out, strings.TrimSpace(cred))
	}
	return out
}

// URLSecrets returns the secrets a URL carries, wherever s holds one
// ("scheme://..."): the password of its user information
// (https://user:password@host, postgres://user:password@host/db) and the values of
// its query parameters named like secrets (?api_key=..., SecretName) and of a signed
// URL's signature (&sig=..., &signature=...). Errors of Go's
// HTTP client print a URL with its password masked but its query whole; a server may
// echo either. Text that is no URL holds none.
func URLSecrets(s string) []string {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "://") {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil
	}
	var out []string
	if pw, ok := u.User.Password(); ok && pw != "" {
		out = append(out, pw)
		if esc := url.UserPassword("", pw).String(); esc != ":"+pw {
			out = append(out, strings.TrimPrefix(esc, ":")) // as the URL writes it
		}
	}
	for name, values := range u.Query() {
		if !SecretName(name) && !strings.EqualFold(name, "sig") && !strings.EqualFold(name, "signature") {
			continue
		}
		for _, v := range values {
			if v == "" {
				continue
			}
			out = append(out, v)
			if esc := url.QueryEscape(v); esc != v {
				out = append(out, esc) // as the URL writes it
			}
		}
	}
	return out
}

// URL returns s, a URL, with the credentials URLSecrets finds in it replaced by
// Redacted, whatever their length; everything else of it is left as written. A
// string that does not parse as a URL is returned as it is.
func URL(s string) string {
	u, err := url.Parse(s)
	if err != nil || !strings.Contains(s, "://") {
		return s
	}
	out := s
	if _, ok := u.User.Password(); ok {
		// scheme://user:password@host...: the password is what lies between the
		// first ':' after "://" and the '@' that ends the user information.
		start := strings.Index(out, "://") + 3
		if at := strings.IndexByte(out[start:], '@'); at >= 0 {
			info := out[start : start+at]
			if colon := strings.IndexByte(info, ':'); colon >= 0 {
				out = out[:start+colon+1] + Redacted + out[start+at:]
			}
		}
	}
	return QueryValues(out, func(k string) bool {
		name, err := url.QueryUnescape(k)
		return err == nil && (SecretName(name) || strings.EqualFold(name, "sig") || strings.EqualFold(name, "signature"))
	})
}

// URLs returns s, a text (an error's), with the credentials of every URL in it
// ("scheme://" up to a space, a quote, a backslash, '<' or '>') replaced as URL
// replaces them, whatever their length: a password, and the values of the query
// parameters named like secrets. Go's HTTP client names the URL of a failed
// request in its error, its password masked but its query whole.
func URLs(s string) string {
	var b strings.Builder
	rest := s
	for {
		i := strings.Index(rest, "://")
		if i < 0 {
			break
		}
		start := i
		for start > 0 && isSchemeByte(rest[start-1]) {
			start--
		}
		end := i + 3
		for end < len(rest) && !strings.ContainsRune(" \t\r\n\"'`\\<>", rune(rest[end])) {
			end++
		}
		b.WriteString(rest[:start])
		if start < i {
			b.WriteString(URL(rest[start:end]))
		} else {
			b.WriteString(rest[start:end]) // "://" with no scheme: no URL
		}
		rest = rest[end:]
	}
	if b.Len() == 0 {
		return s
	}
	b.WriteString(rest)
	return b.String()
}

// isSchemeByte reports whether c may be in a URL's scheme (RFC 3986: letters,
// digits, '+', '-', '.').
func isSchemeByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'
}

// QueryValues returns the URL s with the value of each pair of its query whose
// name (as written, not unescaped) hide says to hide replaced by Redacted;
// hide == nil hides every value, and then a pair with no "=" (a bare flag, or a
// value alone) is replaced whole. Everything else is left as written.
func QueryValues(s string, hide func(name string) bool) string {
	q := strings.IndexByte(s, '?')
	if q < 0 {
		return s
	}
	query, fragment := s[q+1:], ""
	if h := strings.IndexByte(query, '#'); h >= 0 {
		query, fragment = query[:h], query[h:]
	}
	pairs := strings.Split(query, "&")
	for i, p := range pairs {
		switch name, _, ok := strings.Cut(p, "="); {
		case p == "":
		case ok && (hide == nil || hide(name)):
			pairs[i] = name + "=" + Redacted
		case !ok && hide == nil:
			pairs[i] = Redacted
		}
	}
	return s[:q+1] + strings.Join(pairs, "&") + fragment
}
