package mcp_test

import (
	"context"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
)

// A resource read as a blob of a text type whose bytes are UTF-8 is given to the
// model as its text: server-everything serves its dynamic "blob" resources as
// base64 of text/plain, and read_resource answered "[resource …: 56 bytes of
// text/plain, not shown]". Binary blobs, and bytes that are not UTF-8, stay
// described, not shown.
func TestReadResourceShowsATextBlob(t *testing.T) {
	srv := sdk.NewServer(&sdk.Implementation{Name: "blobs", Version: "1"}, nil)
	for uri, res := range map[string]*sdk.ResourceContents{
		"blob://text":   {MIMEType: "text/plain", Blob: []byte("Resource 3: a plaintext blob")},
		"blob://json":   {MIMEType: "application/json; charset=utf-8", Blob: []byte(`{"a":1}`)},
		"blob://png":    {MIMEType: "image/png", Blob: []byte("\x89PNG\r\n\x1a\n")},
		"blob://latin1": {MIMEType: "text/plain", Blob: []byte("caf\xe9")},
	} {
		res.URI = uri
		srv.AddResource(&sdk.Resource{URI: uri, Name: uri, MIMEType: res.MIMEType}, func(context.Context, *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{res}}, nil
		})
	}
	c := startClient(t, map[string]mcp.ServerConfig{"blobs": {Transport: mcp.InProcess(srv)}}, nil)
	for uri, want := range map[string]string{
		"blob://text":   "Resource 3: a plaintext blob",
		"blob://json":   `{"a":1}`,
		"blob://png":    "[resource blob://png: 8 bytes of image/png, not shown]",
		"blob://latin1": "[resource blob://latin1: 4 bytes of text/plain, not shown]",
	} {
		if got := mustCall(t, c, "blobs__read_resource", `{"uri":"`+uri+`"}`); strings.TrimSpace(got) != want {
			t.Errorf("read_resource %s = %q, want %q", uri, got, want)
		}
	}
}
