package rag

import (
	"archive/zip"
	"bytes"
	"fmt"
	"testing"
)

// Word names its heading styles in the user's language: a German document's
// paragraphs are styled "berschrift1" (Überschrift 1), a French one's "Titre2",
// and a style of one's own ("Kapitel") is based on them. The style's definition
// in word/styles.xml says what it is: its name ("heading 1", in English in
// every language), its outline level, or the style it is based on. Read by the
// style ID alone, every heading of such a document was a plain paragraph: its
// chunks were cited by no section.
func TestConvertDOCXReadsLocalisedHeadingStyles(t *testing.T) {
	const styles = `<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<w:styles xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">
<w:style w:type="paragraph" w:default="1" w:styleId="Standard"><w:name w:val="Normal"/></w:style>
<w:style w:type="paragraph" w:styleId="berschrift1"><w:name w:val="heading 1"/><w:basedOn w:val="Standard"/><w:pPr><w:keepNext/><w:outlineLvl w:val="0"/></w:pPr></w:style>
<w:style w:type="paragraph" w:styleId="Titre2"><w:name w:val="Titre 2"/><w:pPr><w:outlineLvl w:val="1"/></w:pPr></w:style>
<w:style w:type="paragraph" w:styleId="Kapitel"><w:name w:val="Kapitel"/><w:basedOn w:val="berschrift1"/></w:style>
<w:style w:type="paragraph" w:styleId="Titel"><w:name w:val="Title"/></w:style>
<w:style w:type="paragraph" w:styleId="Zitat"><w:name w:val="Quote"/><w:basedOn w:val="Standard"/></w:style>
</w:styles>`
	p := func(style, text string) string {
		return `<w:p><w:pPr><w:pStyle w:val="` + style + `"/></w:pPr><w:r><w:t>` + text + `</w:t></w:r></w:p>`
	}
	body := p("Titel", "Handbuch") + p("berschrift1", "Installation") + p("Standard", "Laden Sie das Paket.") +
		p("Titre2", "Prérequis") + p("Zitat", "Ein Zitat.") + p("Kapitel", "Betrieb") + p("Standard", "Starten Sie den Knoten.")
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, content := range map[string]string{
		"word/document.xml": fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>%s</w:body></w:document>`, body),
		"word/styles.xml": styles,
	} {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	md, err := Convert("handbuch.docx", buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	want := "# Handbuch\n\n# Installation\n\nLaden Sie das Paket.\n\n## Prérequis\n\nEin Zitat.\n\n# Betrieb\n\nStarten Sie den Knoten.\n"
	if md != want {
		t.Errorf("Convert =\n%q\nwant\n%q", md, want)
	}
}
