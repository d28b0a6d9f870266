package a2a

import (
	"fmt"
	"strings"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/internal/textclip"
)

// maxShownURI bounds the URI of a file that a file part's description shows.
const maxShownURI = 2048

// withoutFileBytes replaces each file part of ev (of its message, its task's
// artifacts, status and history, its update's artifact or status) by a text part
// that describes the file (fileDescription), keeping its metadata: the model reads the
// tool's answer as text, which never held a file's bytes, and the task the tool
// assembles holds no file, however large, while its stream runs. It returns ev.
func withoutFileBytes(ev sdk.Event) sdk.Event {
	msg := func(m *sdk.Message) {
		if m != nil {
			describeFiles(m.Parts)
		}
	}
	switch v := ev.(type) {
	case *sdk.Message:
		msg(v)
	case *sdk.Task:
		for _, a := range v.Artifacts {
			if a != nil {
				describeFiles(a.Parts)
			}
		}
		msg(v.Status.Message)
		for _, m := range v.History {
			msg(m)
		}
	case *sdk.TaskStatusUpdateEvent:
		msg(v.Status.Message)
	case *sdk.TaskArtifactUpdateEvent:
		if v.Artifact != nil {
			describeFiles(v.Artifact.Parts)
		}
	}
	return ev
}

// describeFiles replaces, in place, each file part of parts by a text part
// describing it.
func describeFiles(parts sdk.ContentParts) {
	for i, p := range parts {
		if f, ok := p.(sdk.FilePart); ok {
			parts[i] = sdk.TextPart{Text: fileDescription(f), Metadata: f.Metadata}
		}
	}
}

// fileDescription describes the file of a file part: its name, media type and size
// (decoded from its bytes' base64), or the URI it is at (a data: URI, or one of
// more than maxShownURI bytes, by its size alone), in brackets:
//
//	[file "report.pdf", application/pdf, 48213 bytes]
//	[file "chart.png", image/png, at https://example.com/chart.png]
func fileDescription(f sdk.FilePart) string {
	var meta sdk.FileMeta
	what := ""
	switch c := f.File.(type) {
	case sdk.FileBytes:
		meta = c.FileMeta
		what = fmt.Sprintf("%d bytes", base64Size(c.Bytes))
	case sdk.FileURI:
		meta = c.FileMeta
		switch {
		case strings.HasPrefix(strings.ToLower(c.URI), "data:") || len(c.URI) > maxShownURI:
			what = fmt.Sprintf("given in a URI of %d bytes, not shown", len(c.URI))
		default:
			what = "at " + c.URI
		}
	default:
		what = "no content"
	}
	s := "[file"
	if meta.Name != "" {
		s += fmt.Sprintf(" %q,", textclip.Head(meta.Name, 200))
	}
	if meta.MimeType != "" {
		s += fmt.Sprintf(" %s,", textclip.Head(meta.MimeType, 100))
	}
	return s + " " + what + "]"
}

// base64Size is the size of the bytes that the base64 s encodes (padded or not,
// either alphabet).
func base64Size(s string) int {
	s = strings.TrimRight(s, "=")
	return len(s) * 3 / 4
}
