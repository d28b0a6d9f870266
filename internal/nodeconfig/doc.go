// Package nodeconfig is the node's configuration file: its fields (File), how it is
// read and checked (Load, Validate: every bad value is named with what is allowed),
// and the default agent it configures (File.Agent: tools, skills, tool disclosure,
// notes, chains, system prompt; ConnectMCP for its MCP servers).
//
// A file enters through Load; the agent leaves as node.Config's fields (Agent.Apply).
// cmd/node runs that agent (run, serve, mcp, tools) and cmd/replay re-decides
// recorded sessions with it (verify, fork), so the two cannot drift apart: a session
// recorded by a node verifies against the same file.
//
// An agents file (YAML; LoadAgents, agents.go) declares the named agents beside the
// default one, each problem reported with its line (AgentsFileError). Its agents'
// models are resolved before a node starts (AgentsFile.ResolveModels), and leave,
// with the rest of each agent, as node.Config.Agents (AgentsFile.NodeAgents).
package nodeconfig
