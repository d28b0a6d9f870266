package a2a

import (
	"net/http"
	"net/url"
	"strings"
)

// cardCredentials carries the credentials a remote agent's card URL holds (a query
// string such as ?api_key=..., a user and password) to every request for the card's
// origin: the card's fetch and the calls to an endpoint the card names on the same
// scheme, host and port. An endpoint elsewhere gets none of them: a card is the
// remote's to write, and the key is not the other host's. The requests' URLs, which
// their errors quote, never hold the credentials: they are added to a copy as the
// request is sent.
type cardCredentials struct {
	next   http.RoundTripper
	origin string // scheme://host:port, lower case
	query  string // the card URL's raw query, as the user wrote it
	user   *url.Userinfo
}

// withCardCredentials returns a client sending through c whose requests for the
// origin of card carry card's credentials, and card without them (the URL to
// fetch); c itself is left as it is. A card URL without credentials returns c.
func withCardCredentials(c *http.Client, card *url.URL) (*http.Client, *url.URL) {
	bare := *card
	bare.RawQuery, bare.ForceQuery, bare.User, bare.Fragment, bare.RawFragment = "", false, nil, "", ""
	if card.RawQuery == "" && card.User == nil {
		return c, &bare
	}
	next := c.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	out := *c
	out.Transport = &cardCredentials{next: next, origin: origin(card), query: card.RawQuery, user: card.User}
	return &out, &bare
}

// origin returns u's scheme, host and port, the port said also when it is the
// scheme's default.
func origin(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[scheme]
	}
	return scheme + "://" + strings.ToLower(u.Hostname()) + ":" + port
}

// RoundTrip implements http.RoundTripper.
func (c *cardCredentials) RoundTrip(req *http.Request) (*http.Response, error) {
	if origin(req.URL) != c.origin {
		return c.next.RoundTrip(req)
	}
	r := req.Clone(req.Context())
	if c.query != "" {
		if r.URL.RawQuery == "" {
			r.URL.RawQuery = c.query
		} else if extra := missing(r.URL.Query(), c.query); extra != "" {
			r.URL.RawQuery += "&" + extra
		}
	}
	if c.user != nil && r.Header.Get("Authorization") == "" {
		pw, _ := c.user.Password()
		r.SetBasicAuth(c.user.Username(), pw)
	}
	return c.next.RoundTrip(r)
}

// missing returns the parameters of the raw query add that have holds none of, as
// add writes them.
func missing(have url.Values, add string) string {
	var out []string
	for _, p := range strings.Split(add, "&") {
		k, _, _ := strings.Cut(p, "=")
		name, err := url.QueryUnescape(k)
		if p == "" || err != nil || have.Has(name) {
			continue
		}
		out = append(out, p)
	}
	return strings.Join(out, "&")
}
