// Package node assembles one Troupe node: the bus, the event log, the actor system
// (session host, model actor, tool actors), the bus router that hands tasks to
// sessions, the live event hub, and the HTTP API.
//
// Tasks enter through Submit, POST /v1/tasks or the bus topic messages.TopicTasks; they
// leave as events in the event log, as live events on messages.TopicEvents (and SSE),
// and as a TaskResult on messages.TopicResults. An embedded node (the default) runs on
// Watermill's in-process GoChannel and a SQLite log in its data directory.
package node
