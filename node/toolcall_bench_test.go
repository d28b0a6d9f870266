package node_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// BenchmarkToolCall measures the cost of the effect path around a tool, in one run:
// the calculator called directly in Go ("direct"); the same call as an effect
// through actors.LocalEffects, the performer every session's tool calls go through
// (idempotency key, flight table, timeout, concurrency bound, panic recovery and the
// reply callback; "effects"); and through the node's API (Node.CallTool, which adds
// the lookup of the tool among the agent's; "node-api"). Compare the three with
// benchstat; the ratio is the price of the effect path for the cheapest tool. The
// "mcp-" pair does the same for a tool of a go-sdk MCP server in the process
// (in-memory transports): called on the catalog's tool directly, and through
// LocalEffects.
func BenchmarkToolCall(b *testing.B) {
	const args = `{"expression":"12 * (7 + 5)"}`
	ctx := context.Background()
	check := func(b *testing.B, out string, err error) {
		if err != nil || out != "144" {
			b.Fatalf("calculator = %q, %v", out, err)
		}
	}
	b.Run("direct", func(b *testing.B) {
		calc := tools.Calculator{}
		b.ReportAllocs()
		for b.Loop() {
			out, err := calc.Call(ctx, tools.Call{Key: "bench/1", Arguments: args})
			check(b, out, err)
		}
	})
	b.Run("effects", func(b *testing.B) {
		reg, err := tools.NewRegistry(tools.Calculator{})
		if err != nil {
			b.Fatal(err)
		}
		e := actors.NewLocalEffects(actors.LocalEffectsConfig{Tools: reg})
		b.Cleanup(func() { e.Close() })
		perform := performer(e, "calculator", args)
		b.ReportAllocs()
		for b.Loop() {
			rep := perform()
			var err error
			if rep.Error != "" {
				err = fmt.Errorf("%s", rep.Error)
			}
			check(b, rep.Output, err)
		}
	})
	b.Run("mcp-direct", func(b *testing.B) {
		client := connect(b, "wx", weatherServer())
		tl, ok := client.Tool("wx__forecast")
		if !ok {
			b.Fatal("no wx__forecast")
		}
		b.ReportAllocs()
		for b.Loop() {
			out, err := tl.Call(ctx, tools.Call{Key: "bench/1", Arguments: `{"city":"Oslo"}`})
			if err != nil || out != "sunny in Oslo" {
				b.Fatalf("forecast = %q, %v", out, err)
			}
		}
	})
	b.Run("mcp-effects", func(b *testing.B) {
		client := connect(b, "wx", weatherServer())
		e := actors.NewLocalEffects(actors.LocalEffectsConfig{Catalog: client})
		b.Cleanup(func() { e.Close() })
		perform := performer(e, "wx__forecast", `{"city":"Oslo"}`)
		b.ReportAllocs()
		for b.Loop() {
			if rep := perform(); rep.Error != "" || rep.Output != "sunny in Oslo" {
				b.Fatalf("forecast = %+v", rep)
			}
		}
	})
	b.Run("node-api", func(b *testing.B) {
		n := nodetest.Start(b, node.Config{Model: benchScript(b)})
		b.ReportAllocs()
		for b.Loop() {
			out, err := n.CallTool(ctx, "", "calculator", args)
			check(b, out, err)
		}
	})
}

// performer returns a function that performs one call of tool with args on e,
// each under the next seq of session "bench", and waits for its reply.
func performer(e *actors.LocalEffects, tool, args string) func() messages.EffectReply {
	replied := make(chan messages.EffectReply, 1)
	i := uint64(0)
	return func() messages.EffectReply {
		i++
		k := messages.EffectKey{SessionID: "bench", Seq: i}
		e.Perform(messages.EffectRequest{V: 1, SessionID: k.SessionID, Key: k,
			Tool: &messages.ToolCallRequested{Key: k.String(), CallID: "c", Tool: tool, Arguments: args}},
			func(rep messages.EffectReply) { replied <- rep })
		return <-replied
	}
}
