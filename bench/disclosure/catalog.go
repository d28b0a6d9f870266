package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// genTool is a generated skill's tool, with a realistic schema. It answers "ok".
type genTool struct {
	spec   messages.ToolSpec
	source string
}

func (g genTool) Spec() messages.ToolSpec { return g.spec }
func (g genTool) Source() string          { return g.source }
func (g genTool) Call(context.Context, tools.Call) (string, error) {
	return "ok", nil
}

// task is a scripted task: its text paraphrases the description of the tool it needs.
type task struct {
	text, tool, group string
	args              string // the call's arguments, valid for the tool's schema ("" for {"id":"1"})
}

type server struct {
	name, title string
	nouns       []string
}

// servers are the generated MCP servers: 7 servers, 5 nouns, 5 verbs each.
var servers = []server{
	{"github", "GitHub", []string{"issue", "pull request", "repository", "branch", "release"}},
	{"calendar", "the calendar", []string{"event", "calendar", "attendee", "reminder", "room booking"}},
	{"crm", "the CRM", []string{"contact", "deal", "company", "lead", "note"}},
	{"billing", "billing", []string{"invoice", "payment", "subscription", "refund", "customer"}},
	{"storage", "cloud storage", []string{"bucket", "file", "folder", "share link", "snapshot"}},
	{"helpdesk", "the help desk", []string{"ticket", "agent", "macro", "tag", "satisfaction survey"}},
	{"analytics", "analytics", []string{"dashboard", "report", "metric", "alert", "segment"}},
}

type verb struct {
	name        string
	description string // %[1]s: noun, %[2]s: service, %[3]s: plural noun
	params      string // a JSON Schema, %[1]s: noun
	paraphrase  string // the task's text, same verbs
	args        string // arguments params accepts: a server checks them against it
}

var verbs = []verb{
	{"create", "Create a new %[1]s in %[2]s with the given fields and return its ID.",
		`{"type":"object","properties":{"title":{"type":"string","description":"Title or name of the %[1]s"},"description":{"type":"string","description":"Longer description of the %[1]s, Markdown allowed"},"owner":{"type":"string","description":"User who owns the %[1]s"},"tags":{"type":"array","items":{"type":"string"},"description":"Labels to attach"}},"required":["title"]}`,
		"I need a brand-new %[1]s added to %[2]s, titled Q3 plan.", `{"title":"Q3 plan"}`},
	{"list", "List %[3]s in %[2]s, filtered by status and owner, newest first, with paging.",
		`{"type":"object","properties":{"status":{"type":"string","enum":["open","closed","all"],"description":"Only %[1]s items with this status"},"owner":{"type":"string","description":"Only items owned by this user"},"limit":{"type":"integer","minimum":1,"maximum":100,"description":"Page size"},"cursor":{"type":"string","description":"Cursor of the next page"}}}`,
		"Which %[3]s does %[2]s have that are open? Filter by status, newest first.", `{"status":"open"}`},
	{"get", "Get one %[1]s from %[2]s by its ID, with all its details.",
		`{"type":"object","properties":{"id":{"type":"string","description":"ID of the %[1]s"},"include_history":{"type":"boolean","description":"Also return the change history"}},"required":["id"]}`,
		"Fetch the details of %[1]s 4711 from %[2]s.", `{"id":"4711"}`},
	{"update", "Update the fields of an existing %[1]s in %[2]s; fields left out keep their values.",
		`{"type":"object","properties":{"id":{"type":"string","description":"ID of the %[1]s"},"fields":{"type":"object","description":"Fields to change and their new values"},"notify":{"type":"boolean","description":"Notify watchers of the change"}},"required":["id","fields"]}`,
		"Change a couple of fields on the existing %[1]s 12 in %[2]s.", `{"id":"12","fields":{"status":"closed"}}`},
	{"delete", "Delete a %[1]s from %[2]s permanently; this cannot be undone.",
		`{"type":"object","properties":{"id":{"type":"string","description":"ID of the %[1]s to remove"},"confirm":{"type":"boolean","description":"Must be true"}},"required":["id","confirm"]}`,
		"Permanently get rid of %[1]s 99 in %[2]s.", `{"id":"99","confirm":true}`},
}

// skillTools are the tools of generated skills: 5 skills, 5 tools each, each with the
// task that paraphrases it.
var skillTools = []struct {
	skill, name, description, paraphrase string
}{
	{"pdf-forms", "pdf_fill_form", "Fill the fields of a PDF form from JSON data and save the filled PDF.", "Put these values into the fields of the PDF form and save it."},
	{"pdf-forms", "pdf_extract_fields", "Extract the names and types of the fillable fields of a PDF form.", "What fillable fields does this PDF form have, and of which types?"},
	{"pdf-forms", "pdf_merge", "Merge several PDF files into one document, in the given order.", "Combine these three PDF files into a single document."},
	{"pdf-forms", "pdf_split", "Split a PDF into one file per page range.", "Cut this PDF into separate files by page range."},
	{"pdf-forms", "pdf_sign", "Add a digital signature to a PDF document with a certificate.", "Sign the PDF document digitally with my certificate."},
	{"spreadsheets", "sheet_read_range", "Read a range of cells from a spreadsheet sheet as rows.", "Give me the cells A1:D20 of the spreadsheet as rows."},
	{"spreadsheets", "sheet_write_range", "Write rows of values into a range of cells of a spreadsheet.", "Write these rows of values into the spreadsheet cells starting at B2."},
	{"spreadsheets", "sheet_add_chart", "Add a chart built from a cell range to a spreadsheet sheet.", "Draw a chart of the cell range in the spreadsheet."},
	{"spreadsheets", "sheet_pivot_table", "Build a pivot table summarizing a spreadsheet range by columns.", "Summarize the spreadsheet range in a pivot table by region."},
	{"spreadsheets", "sheet_formula_check", "Check the formulas of a spreadsheet for errors and broken references.", "Are there formulas with errors or broken references in this spreadsheet?"},
	{"slides", "slides_create_deck", "Create a slide deck from an outline with a title slide.", "Turn this outline into a slide deck with a title slide."},
	{"slides", "slides_add_speaker_notes", "Add speaker notes to each slide of a deck.", "Write speaker notes for every slide of the deck."},
	{"slides", "slides_apply_theme", "Apply a color theme and fonts to every slide of a deck.", "Give the whole deck our color theme and fonts."},
	{"slides", "slides_export_pdf", "Export a slide deck as a PDF handout.", "Export the deck as a handout I can print."},
	{"slides", "slides_reorder", "Reorder the slides of a deck by their numbers.", "Move slide 5 before slide 2 in the deck order."},
	{"images", "image_resize", "Resize an image to a width and height in pixels.", "Make this image 800 by 600 pixels."},
	{"images", "image_crop", "Crop an image to a rectangle given in pixels.", "Cut out the rectangle at 10,10 to 200,200 of the image."},
	{"images", "image_remove_background", "Remove the background of a photo, keeping the subject.", "Take the background out of this photo."},
	{"images", "image_convert_format", "Convert an image between formats such as PNG, JPEG and WebP.", "Turn the PNG into a WebP."},
	{"images", "image_caption", "Describe the content of an image in one sentence for alt text.", "Write alt text describing this image."},
	{"translation", "translate_text", "Translate text between languages, keeping its formatting.", "Translate this paragraph to German."},
	{"translation", "translate_detect_language", "Detect the language of a text.", "Which language is this text written in?"},
	{"translation", "translate_glossary_add", "Add a term and its required translation to the glossary.", "Add this term with its required translation to our glossary."},
	{"translation", "translate_document", "Translate a whole document file, keeping its layout.", "Translate the whole document file to French, keeping the layout."},
	{"translation", "translate_review", "Review a translation against its source for mistakes.", "Check this translation against the source text for mistakes."},
}

func plural(noun string) string {
	switch {
	case strings.HasSuffix(noun, "y") && !strings.HasSuffix(noun, "ey"):
		return noun[:len(noun)-1] + "ies"
	case strings.HasSuffix(noun, "s") || strings.HasSuffix(noun, "h"):
		return noun + "es"
	}
	return noun + "s"
}

// generated is what the benchmark generates: 200 tools, 175 of them the tools of 7
// MCP servers (25 each) and 25 the tools of 5 skills (5 each), and the scripted tasks.
type generated struct {
	servers map[string]*sdk.Server // by name, each in this process
	skills  []tools.Tool
	tasks   []task
	count   int // tools in all
}

// generate returns the servers, the skills' tools and the scripted tasks: one for
// every fourth server tool and every other skill tool, 57 in all. A server's tool
// "create_issue" of the server "github" is "github__create_issue" in the node's
// catalog (package mcp).
func generate() generated {
	g := generated{servers: map[string]*sdk.Server{}}
	i := 0
	for _, s := range servers {
		srv := sdk.NewServer(&sdk.Implementation{Name: s.name, Version: "1"}, nil)
		for _, noun := range s.nouns {
			for _, v := range verbs {
				name := v.name + "_" + strings.ReplaceAll(noun, " ", "_")
				srv.AddTool(&sdk.Tool{Name: name, Description: fmt.Sprintf(v.description, noun, s.title, plural(noun)),
					InputSchema: json.RawMessage(fmt.Sprintf(v.params, noun))}, answerOK)
				if i%4 == 0 {
					t := task{text: fmt.Sprintf(v.paraphrase, noun, s.title, plural(noun)), tool: s.name + mcp.Separator + name, group: "mcp:" + s.name, args: v.args}
					g.tasks = append(g.tasks, t)
				}
				i++
				g.count++
			}
		}
		g.servers[s.name] = srv
	}
	for j, k := range skillTools {
		src := "skill:" + k.skill
		g.skills = append(g.skills, genTool{source: src, spec: messages.ToolSpec{Name: k.name, Description: k.description,
			Parameters: json.RawMessage(`{"type":"object","properties":{"input":{"type":"string","description":"Path of the input file"},"output":{"type":"string","description":"Path of the output file"},"options":{"type":"object","description":"Options of the operation"}},"required":["input"]}`)}})
		if j%2 == 0 {
			g.tasks = append(g.tasks, task{text: k.paraphrase, tool: k.name, group: src})
		}
		g.count++
	}
	return g
}

// answerOK is every server tool's handler.
func answerOK(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "ok"}}}, nil
}

// connect returns a client of the generated servers (each over in-memory transports),
// running until ctx ends, with every server connected and its tools listed.
func (g generated) connect(ctx context.Context) (*mcp.Client, error) {
	cfg := mcp.ClientConfig{Servers: map[string]mcp.ServerConfig{}, Logger: slog.New(slog.DiscardHandler)}
	for name, srv := range g.servers {
		cfg.Servers[name] = mcp.ServerConfig{Transport: mcp.InProcess(srv)}
	}
	c, err := mcp.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	go c.Run(ctx)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.WaitReady(wctx); err != nil {
		c.Close()
		return nil, err
	}
	for _, st := range c.Status() {
		if st.State != mcp.StateConnected || len(st.Tools) != 25 {
			c.Close()
			return nil, fmt.Errorf("mcp server %s: %s, %d tools (%s)", st.Name, st.State, len(st.Tools), st.Error)
		}
	}
	return c, nil
}
