package provider

import (
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/troupe-run/troupe/llm"
)

// Names of the known providers, and of the two pseudo-providers.
const (
	OpenAI      = "openai"
	DeepSeek    = "deepseek"
	Qwen        = "qwen"
	Zhipu       = "zhipu"
	Moonshot    = "moonshot"
	SiliconFlow = "siliconflow"
	ModelScope  = "modelscope"
	Ollama      = "ollama"
	VLLM        = "vllm"
	// OpenAICompatible is any other server that speaks the OpenAI API, at a base URL
	// the configuration names.
	OpenAICompatible = "openai-compatible"
	// Offline is llm.Offline, the rule-based model that needs no server.
	Offline = llm.OfflineName
)

// Provider is one known OpenAI-compatible service.
type Provider struct {
	Name    string
	BaseURL string
	// DefaultModel is used when no model is configured; empty means one must be (a
	// vLLM server serves whatever model it was started with).
	DefaultModel string
	// DefaultEmbeddingModel is empty when the provider offers no embeddings API.
	DefaultEmbeddingModel string
	// KeyEnv is the environment variable that holds the API key; empty for local
	// servers, which need none.
	KeyEnv string
	// Aliases are other names the provider answers to, e.g. "dashscope" for qwen.
	Aliases []string
	// Hosts are the API host names that identify the provider in a base URL. Local
	// providers are identified by a loopback host and their port instead.
	Hosts []string
	// Local providers run on this machine and are found by probing BaseURL.
	Local bool
}

// Providers returns the known providers in detection order: the order in which
// their key variables are consulted, then the local servers in probing order.
func Providers() []Provider {
	return []Provider{
		{Name: OpenAI, BaseURL: "https://api.openai.com/v1", DefaultModel: "gpt-4o-mini",
			DefaultEmbeddingModel: "text-embedding-3-small", KeyEnv: "OPENAI_API_KEY", Hosts: []string{"api.openai.com"}},
		{Name: DeepSeek, BaseURL: "https://api.deepseek.com/v1", DefaultModel: "deepseek-chat",
			KeyEnv: "DEEPSEEK_API_KEY", Hosts: []string{"api.deepseek.com"}},
		{Name: Qwen, BaseURL: "https://dashscope.aliyuncs.com/compatible-mode/v1", DefaultModel: "qwen-plus",
			DefaultEmbeddingModel: "text-embedding-v3", KeyEnv: "DASHSCOPE_API_KEY", Aliases: []string{"dashscope", "tongyi"},
			Hosts: []string{"dashscope.aliyuncs.com", "dashscope-intl.aliyuncs.com"}},
		{Name: Zhipu, BaseURL: "https://open.bigmodel.cn/api/paas/v4", DefaultModel: "glm-4-flash",
			DefaultEmbeddingModel: "embedding-3", KeyEnv: "ZHIPU_API_KEY", Aliases: []string{"glm", "bigmodel", "zhipuai"},
			Hosts: []string{"open.bigmodel.cn"}},
		{Name: Moonshot, BaseURL: "https://api.moonshot.cn/v1", DefaultModel: "moonshot-v1-8k",
			KeyEnv: "MOONSHOT_API_KEY", Aliases: []string{"kimi"}, Hosts: []string{"api.moonshot.cn", "api.moonshot.ai"}},
		{Name: SiliconFlow, BaseURL: "https://api.siliconflow.cn/v1", DefaultModel: "Qwen/Qwen2.5-7B-Instruct",
			DefaultEmbeddingModel: "BAAI/bge-m3", KeyEnv: "SILICONFLOW_API_KEY",
			Hosts: []string{"api.siliconflow.cn", "api.siliconflow.com"}},
		{Name: ModelScope, BaseURL: "https://api-inference.modelscope.cn/v1", DefaultModel: "Qwen/Qwen2.5-7B-Instruct",
			KeyEnv: "MODELSCOPE_API_KEY", Hosts: []string{"api-inference.modelscope.cn"}},
		{Name: Ollama, BaseURL: "http://127.0.0.1:11434/v1", DefaultModel: "llama3.2",
			DefaultEmbeddingModel: "nomic-embed-text", Local: true},
		{Name: VLLM, BaseURL: "http://127.0.0.1:8000/v1", Local: true},
	}
}

// Lookup finds a known provider by name or alias, ignoring case.
func Lookup(name string) (Provider, bool) {
	name = strings.ToLower(strings.TrimSpace(name))
	for _, p := range Providers() {
		if p.Name == name || slices.Contains(p.Aliases, name) {
			return p, true
		}
	}
	return Provider{}, false
}

// ByBaseURL finds the provider a base URL belongs to: by its host name, or, for a
// loopback host, by the port a local server listens on by default.
func ByBaseURL(baseURL string) (Provider, bool) {
	u, err := url.Parse(baseURL)
	if err != nil || u.Host == "" {
		return Provider{}, false
	}
	host := strings.ToLower(u.Hostname())
	for _, p := range Providers() {
		if slices.Contains(p.Hosts, host) {
			return p, true
		}
		if p.Local && isLoopback(host) && u.Port() == portOf(p.BaseURL) {
			return p, true
		}
	}
	return Provider{}, false
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func portOf(baseURL string) string {
	u, _ := url.Parse(baseURL) // the table's URLs parse
	return u.Port()
}
