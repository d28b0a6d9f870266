package mcp

import (
	"context"
	"encoding/json"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// elicitDefaults answers a server's elicitation/create for a server whose
// Elicitation is ElicitDefaults: a form whose every required field has a default
// value in its schema is accepted with the defaults of all its fields that have
// one (SEP-1034); any other request (a required field without a default, a URL to
// visit, a schema it cannot read) is declined. Nobody is asked: the node runs
// unattended.
func elicitDefaults(_ context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
	decline := &sdk.ElicitResult{Action: "decline"}
	if req.Params == nil || req.Params.Mode != "" && req.Params.Mode != "form" {
		return decline, nil
	}
	var schema struct {
		Properties map[string]struct {
			Default json.RawMessage `json:"default"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	raw, err := json.Marshal(req.Params.RequestedSchema)
	if err != nil || json.Unmarshal(raw, &schema) != nil {
		return decline, nil
	}
	content := map[string]any{}
	for name, p := range schema.Properties {
		if len(p.Default) == 0 || string(p.Default) == "null" {
			continue
		}
		var v any
		if json.Unmarshal(p.Default, &v) != nil {
			return decline, nil
		}
		content[name] = v
	}
	for _, name := range schema.Required {
		if _, ok := content[name]; !ok {
			return decline, nil
		}
	}
	return &sdk.ElicitResult{Action: "accept", Content: content}, nil
}
