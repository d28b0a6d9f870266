package rag

import (
	"slices"
	"testing"
)

// Documentation sites put a permalink in every heading: Sphinx (Read the Docs,
// the Python docs) an "¶" link titled "Permalink to this heading", GitHub's
// rendered READMEs an empty anchor, others link the heading's text to itself.
// Converted to Markdown, the links stayed in the heading path: a citation read
// "[guide.html > ## Install[¶](#install "Permalink to this heading")]", a model
// asked to copy it rarely did, and the keyword index, which holds every chunk's
// heading path, found "permalink" and "heading" in every chunk of such a site. A
// heading's path entry is its text: links reduced to their text, permalinks
// dropped.
func TestHeadingPathHoldsTheHeadingsTextNotItsLinks(t *testing.T) {
	for _, c := range []struct {
		name, file, body string
		want             []string
	}{
		{"sphinx", "a.html", `<h1>Guide<a class="headerlink" href="#guide" title="Permalink to this heading">¶</a></h1>` +
			`<h2>Install<a class="headerlink" href="#install" title="Permalink to this heading">¶</a></h2><p>Run it.</p>`, []string{"# Guide", "## Install"}},
		{"github", "a.html", `<h2><a id="user-content-install" class="anchor" aria-hidden="true" href="#install"></a>Install</h2><p>Run it.</p>`,
			[]string{"## Install"}},
		{"self link", "a.html", `<h2 id="install"><a href="#install">Install</a></h2><p>Run it.</p>`, []string{"## Install"}},
		{"markdown link", "a.md", "## [Install](https://example.com/install \"How\") on Linux\n\nRun it.\n", []string{"## Install on Linux"}},
		{"changelog", "a.md", "## [1.2.0] - 2024-05-01\n\nRun it.\n", []string{"## [1.2.0] - 2024-05-01"}},
	} {
		md, err := Convert(c.file, []byte(c.body))
		if err != nil {
			t.Fatal(err)
		}
		ps := Split(md)
		if len(ps) != 1 || !slices.Equal(ps[0].HeadingPath, c.want) {
			var paths [][]string
			for _, p := range ps {
				paths = append(paths, p.HeadingPath)
			}
			t.Errorf("%s: heading paths %q, want %q (Markdown %q)", c.name, paths, c.want, md)
		}
	}
}
