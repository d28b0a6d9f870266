package mcp

import (
	"context"
	"encoding/json"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// elicitDefaults accepts a form with its defaults when every required field has
// one, and declines any other request.
func TestElicitDefaults(t *testing.T) {
	props := map[string]any{
		"name": map[string]any{"type": "string", "default": "ada"},
		"age":  map[string]any{"type": "integer", "default": 36},
		"note": map[string]any{"type": "string"}}
	for _, tc := range []struct {
		name   string
		params *sdk.ElicitParams
		want   string
	}{
		{"defaults", &sdk.ElicitParams{RequestedSchema: map[string]any{"type": "object", "properties": props, "required": []string{"name", "age"}}}, `accept {"age":36,"name":"ada"}`},
		{"nothing required", &sdk.ElicitParams{RequestedSchema: map[string]any{"type": "object", "properties": props}}, `accept {"age":36,"name":"ada"}`},
		{"required without default", &sdk.ElicitParams{RequestedSchema: map[string]any{"type": "object", "properties": props, "required": []string{"name", "note"}}}, "decline null"},
		{"url", &sdk.ElicitParams{Mode: "url", URL: "https://example.com/pay"}, "decline null"},
	} {
		res, err := elicitDefaults(context.Background(), &sdk.ElicitRequest{Params: tc.params})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		content, _ := json.Marshal(res.Content)
		if got := res.Action + " " + string(content); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
