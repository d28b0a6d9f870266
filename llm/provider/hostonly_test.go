package provider_test

import "testing"

// A base URL that is a known provider's host alone (or a local server's port
// alone) gets that provider's API path: requests went to the host's
// /chat/completions, and every call failed "HTTP 404". A base URL with a path of
// its own is kept as given, and so is an unknown host's.
func TestDetectAddsAKnownProvidersAPIPathToItsBareHost(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"DASHSCOPE_API_KEY", "q", "LLM_BASE_URL", "https://dashscope-intl.aliyuncs.com"}, "https://dashscope-intl.aliyuncs.com/compatible-mode/v1"},
		{[]string{"OPENAI_API_KEY", "o", "LLM_BASE_URL", "https://api.openai.com/"}, "https://api.openai.com/v1"},
		{[]string{"ZHIPU_API_KEY", "z", "TROUPE_LLM_PROVIDER", "zhipu", "LLM_BASE_URL", "https://open.bigmodel.cn"}, "https://open.bigmodel.cn/api/paas/v4"},
		{[]string{"LLM_BASE_URL", "http://localhost:11434"}, "http://localhost:11434/v1"},
		{[]string{"LLM_BASE_URL", "http://localhost:11434/v1"}, "http://localhost:11434/v1"},
		{[]string{"LLM_API_KEY", "g", "LLM_BASE_URL", "https://api.deepseek.com/beta"}, "https://api.deepseek.com/beta"},
		{[]string{"LLM_BASE_URL", "http://10.0.0.5:9000", "LLM_MODEL", "m"}, "http://10.0.0.5:9000"},
		// A provider named for a proxy's host: the proxy's paths are its own.
		{[]string{"TROUPE_LLM_PROVIDER", "deepseek", "LLM_API_KEY", "g", "LLM_BASE_URL", "http://proxy.internal:8080"}, "http://proxy.internal:8080"},
	} {
		if r := detect(t, envOf(c.env...)); r.BaseURL != c.want {
			t.Errorf("%v: base URL %s, want %s", c.env, r.BaseURL, c.want)
		}
	}
}
