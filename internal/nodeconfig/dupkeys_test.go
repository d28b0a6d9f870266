package nodeconfig_test

import (
	"strings"
	"testing"
)

// A configuration file with a key twice in one object is refused, naming the key
// and its line, as the agents file's fields given twice are: encoding/json took the
// last silently, so a second "memory" section (or a "model" left below an edited
// one) dropped the first without a word.
func TestConfigWithAKeyTwiceIsRefused(t *testing.T) {
	for body, want := range map[string]string{
		"{\"model\": \"openai:gpt-4o\",\n \"model\": \"offline\"}":                                        `line 2: "model" is given twice`,
		"{\"memory\": {\"tool\": true, \"namespace\": \"user:alice\"},\n\n \"memory\": {\"tool\": true}}": `line 3: "memory" is given twice`,
		"{\"memory\": {\"tool\": true,\n \"tool\": false}}":                                               `line 2: "memory.tool" is given twice`,
	} {
		_, err := loadString(t, body)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %s", body, err, want)
		}
	}
	// In a map's objects.
	if _, err := loadString(t, "{\"mcp_servers\": {\"a\": {\"command\": \"x\"},\n \"b\": {\"command\": \"y\",\n \"command\": \"z\"}}}"); err == nil ||
		!strings.Contains(err.Error(), `line 3: "mcp_servers.b.command" is given twice`) {
		t.Errorf("in a map: %v", err)
	}
	// The same key in two objects is no repeat.
	if _, err := loadString(t, `{"memory": {"tool": true}, "knowledge": {"tool": true}}`); err != nil {
		t.Fatal(err)
	}
}

// A key that names a field only when case is ignored ("Model", "Memory.Tool") is
// refused, naming the field: encoding/json took it for the field, so that
// {"model":"a","Model":"b"} ran b, and a reader of the file sees no "model" set.
func TestConfigWithAMiscasedKeyIsRefused(t *testing.T) {
	for _, c := range []struct{ file, key, want string }{
		{`{"Model": "offline"}`, `"Model"`, `"model"`},
		{`{"model": "offline", "Model": "other"}`, `"Model"`, `"model"`},
		{"{\n  \"memory\": {\n    \"TOOL\": true\n  }\n}", `"memory.TOOL"`, `"tool"`},
	} {
		_, err := loadString(t, c.file)
		if err == nil || !strings.Contains(err.Error(), c.key+" is not a field; the field is "+c.want) {
			t.Fatalf("%s: %v", c.file, err)
		}
		if c.key == `"memory.TOOL"` && !strings.Contains(err.Error(), "line 3:") {
			t.Fatalf("%s: %v; want line 3", c.file, err)
		}
	}
	if _, err := loadString(t, `{"model": "offline"}`); err != nil {
		t.Fatal(err)
	}
}
