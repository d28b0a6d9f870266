package tools_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/tools"
)

// A tool that implements Tool itself (not Func) with a schema JSON Schema does not
// accept is refused by NewRegistry, naming the tool and the fault: taken, it is
// sent to the model with every request, and a provider that checks schemas
// (OpenAI's "Invalid schema for function") refuses every request of every task.
func TestRegistryRefusesAToolWhoseSchemaIsNotJSONSchema(t *testing.T) {
	for _, c := range []struct{ params, want string }{
		{`{"type":"object","properties":{"n":{"type":"int"}}}`, `unknown type "int"`},
		{`{"type":"object","properties":{"n":{"$ref":"#/$defs/missing"}}}`, `missing`},
		{`{"type":"object","required":"n"}`, `required`},
	} {
		bad := specTool{Name: "bad", Description: "d", Parameters: json.RawMessage(c.params)}
		_, err := tools.NewRegistry(tools.Calculator{}, bad)
		if err == nil || !strings.Contains(err.Error(), `"bad"`) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewRegistry with parameters %s: %v, want an error naming the tool and %s", c.params, err, c.want)
		}
	}
}
