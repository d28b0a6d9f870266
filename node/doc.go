// Package node assembles one Troupe node: the bus, the event log, the actor system
// (session host, model actor behind the gateway, tool actors), the bus router with its
// middleware (retry, poison topic, dedupe, panic recovery, metrics) that hands tasks
// to sessions, the live event hub, the event sink, and the HTTP API.
//
// Tasks enter through Submit, POST /v1/tasks or the bus topic messages.TopicTasks (an
// envelope, or the plain JSON task any Kafka client can publish); they leave as
// events in the event log, as live events on messages.TopicEvents (and SSE), and as a
// TaskResult on messages.TopicResults. An embedded node (the default) runs on
// Watermill's in-process GoChannel and a SQLite log in its data directory; Config.Bus
// puts it on Kafka (package kafka) and Config.Log on ClickHouse.
package node
