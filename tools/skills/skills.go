package skills

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/troupe-run/troupe/internal/cjk"
	"go.yaml.in/yaml/v3"
)

// Defaults and limits.
const (
	// DefaultScriptTimeout bounds a script's run when Config.ScriptTimeout is zero.
	DefaultScriptTimeout = 20 * time.Second
	// DefaultMaxSkillBytes is the largest SKILL.md Load accepts by default.
	DefaultMaxSkillBytes = 128 << 10
	// DefaultMaxOutputBytes is how much of a file or a script's output reaches the model.
	DefaultMaxOutputBytes = 64 << 10
	// MaxDescription is the longest description, in characters (the Agent Skills limit).
	MaxDescription = 1024
	// maxListed is how many files of a folder load_skill lists.
	maxListed = 100
)

// FileName is the file that makes a folder a skill.
const FileName = "SKILL.md"

// Config says where skills are and what they may do.
type Config struct {
	// Dir holds one folder per skill.
	Dir string
	// AllowScripts lets run_skill_script run a skill's scripts/. Off by default.
	AllowScripts bool
	// ScriptTimeout bounds one script's run (default DefaultScriptTimeout).
	ScriptTimeout time.Duration
	// MaxSkillBytes is the largest SKILL.md loaded (default DefaultMaxSkillBytes).
	MaxSkillBytes int
	// MaxOutputBytes is how much of a file or of a script's output the model gets
	// (default DefaultMaxOutputBytes); the rest is cut with a note.
	MaxOutputBytes int
}

func (c *Config) setDefaults() {
	if c.ScriptTimeout <= 0 {
		c.ScriptTimeout = DefaultScriptTimeout
	}
	if c.MaxSkillBytes <= 0 {
		c.MaxSkillBytes = DefaultMaxSkillBytes
	}
	if c.MaxOutputBytes <= 0 {
		c.MaxOutputBytes = DefaultMaxOutputBytes
	}
}

// Skill is one loaded skill: its level-1 metadata and its folder.
type Skill struct {
	Name        string
	Description string
	// Dir is the skill's folder, absolute.
	Dir string
}

// Problem is why a skill folder was skipped.
type Problem struct {
	// Path is the file at fault (a SKILL.md, or the folder that lacks one).
	Path   string
	Reason string
}

func (p *Problem) Error() string { return fmt.Sprintf("skill %s: %s", p.Path, p.Reason) }

// Set is the skills of a directory. It is immutable and safe for concurrent use.
type Set struct {
	cfg    Config
	skills []Skill // sorted by name
}

// namePattern is the Agent Skills name: lowercase letters, digits and single
// hyphens, neither first nor last.
var namePattern = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// Load reads the skills of cfg.Dir: each folder directly in it that holds SKILL.md. A
// folder that is not a valid skill is skipped and reported among the problems (each
// a *Problem naming the file); err is set only when cfg.Dir cannot be read.
func Load(cfg Config) (set *Set, problems []error, err error) {
	cfg.setDefaults()
	if cfg.Dir == "" {
		return nil, nil, errors.New("skills: no skills directory given")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, nil, fmt.Errorf("skills: directory %q: %w", cfg.Dir, err)
	}
	cfg.Dir = dir
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("skills: read the skills directory: %w", err)
	}
	set = &Set{cfg: cfg}
	for _, e := range entries { // os.ReadDir sorts by name
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		folder := filepath.Join(dir, e.Name())
		info, err := os.Stat(folder)
		if err != nil && e.Type()&fs.ModeSymlink != 0 {
			// A link to a skill that moved, or to itself: not a README beside them.
			problems = append(problems, &Problem{Path: folder, Reason: fmt.Sprintf("a symbolic link that leads nowhere: %v", pathless(err))})
			continue
		}
		if err != nil || !info.IsDir() {
			continue // a file beside the skills, e.g. a README
		}
		s, err := readSkill(folder, cfg.MaxSkillBytes)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		set.skills = append(set.skills, s)
	}
	return set, problems, nil
}

// readSkill reads and checks the SKILL.md of folder.
func readSkill(folder string, maxBytes int) (Skill, error) {
	path := filepath.Join(folder, FileName)
	fail := func(format string, args ...any) (Skill, error) {
		return Skill{}, &Problem{Path: path, Reason: fmt.Sprintf(format, args...)}
	}
	root, err := os.OpenRoot(folder)
	if err != nil {
		return fail("%v", err)
	}
	defer root.Close()
	b, err := readFile(root, FileName, maxBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return Skill{}, &Problem{Path: folder, Reason: "the folder has no " + FileName}
	}
	if err != nil {
		return fail("%v", err)
	}
	meta, _, err := parse(b)
	if err != nil {
		return fail("%v", err)
	}
	if folderName := filepath.Base(folder); meta.Name != folderName {
		return fail("name %q is not the folder's name %q; the two must be the same", meta.Name, folderName)
	}
	return Skill{Name: meta.Name, Description: meta.Description, Dir: folder}, nil
}

// frontMatter is the YAML header of SKILL.md. Other fields the Agent Skills format
// allows (license, compatibility, metadata, allowed-tools) are read past.
type frontMatter struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
}

// parse splits SKILL.md into its front matter, checked, and its body.
func parse(b []byte) (frontMatter, string, error) {
	var fm frontMatter
	if !utf8.Valid(b) {
		return fm, "", errors.New("the file is not UTF-8 text")
	}
	text := strings.ReplaceAll(strings.TrimPrefix(string(b), "\uFEFF"), "\r\n", "\n")
	first, rest, _ := strings.Cut(text, "\n")
	if !delimiter(first) {
		return fm, "", errors.New("no front matter: the file must begin with a line \"---\", then YAML with name and description, then \"---\"")
	}
	var header, body string
	closed := false
	for off := 0; !closed; {
		line, after, found := strings.Cut(rest[off:], "\n")
		if delimiter(line) {
			header, body, closed = rest[:off], after, true
		} else if !found {
			return fm, "", errors.New("the front matter is not closed: add a line \"---\" after the YAML")
		}
		off += len(line) + 1
	}
	if err := yaml.Unmarshal([]byte(header), &fm); err != nil {
		return fm, "", fmt.Errorf("the front matter is not valid YAML: %s", fileLines(err))
	}
	fm.Name, fm.Description = strings.TrimSpace(fm.Name), strings.TrimSpace(fm.Description)
	switch {
	case fm.Name == "":
		return fm, "", errors.New("the front matter has no name")
	case len(fm.Name) > 64 || !namePattern.MatchString(fm.Name):
		return fm, "", fmt.Errorf("name %q: want 1 to 64 lowercase letters, digits and hyphens, not starting or ending with a hyphen", fm.Name)
	case fm.Description == "":
		return fm, "", errors.New("the front matter has no description")
	case !utf8.ValidString(fm.Description):
		// The file is UTF-8, but YAML's !!binary decodes base64 into any bytes.
		return fm, "", errors.New("the description is not UTF-8 text (a !!binary value?): a description is plain text")
	case utf8.RuneCountInString(fm.Description) > MaxDescription:
		return fm, "", fmt.Errorf("the description has %d characters: want at most %d", utf8.RuneCountInString(fm.Description), MaxDescription)
	}
	if i, r := hiddenRune(fm.Description); i >= 0 {
		return fm, "", fmt.Errorf("the description holds %U at character %d: a description is plain text, without control characters (NUL, terminal escapes) or bidirectional overrides, which would reach the system prompt and MCP clients unseen", r, i+1)
	}
	return fm, strings.TrimSpace(body), nil
}

// delimiter reports whether line is a front matter's "---" line; blanks after the
// dashes, which an editor may keep and a reader does not see, are allowed.
func delimiter(line string) bool { return strings.TrimRight(line, " \t") == "---" }

var yamlLine = regexp.MustCompile(`line (\d+)`)

// fileLines is a front matter's YAML error on one line, with the file's line
// numbers: the parser counts from the line after the first "---", so its "line 2"
// is the file's line 3, and it puts each of its unmarshal errors on a line.
func fileLines(err error) string {
	msg := strings.TrimPrefix(strings.TrimPrefix(err.Error(), "yaml: "), "unmarshal errors:\n")
	msg = strings.Join(strings.Fields(strings.ReplaceAll(msg, "\n", ";")), " ")
	return yamlLine.ReplaceAllStringFunc(msg, func(s string) string {
		n, _ := strconv.Atoi(strings.TrimPrefix(s, "line "))
		return fmt.Sprintf("line %d", n+1)
	})
}

// hiddenRune finds the first character of text that a reader of the skill does not
// see but a model or a terminal acts on: a control character other than tab and
// newline (NUL, ESC of a terminal escape, …), a format character (bidirectional
// overrides U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C; zero-width
// spaces, word joiners, a byte order mark, a soft hyphen; the tag characters
// U+E0000–U+E007F, each an invisible copy of an ASCII character, which spell out
// whole sentences a reader never sees) but the zero-width joiner and non-joiner
// that emoji and scripts (Persian, the Indic ones) need, or a variation selector
// of the supplement (U+E0100–U+E01EF, which can carry hidden bytes too). It
// returns its index in characters, or -1.
func hiddenRune(text string) (int, rune) {
	i := 0
	for _, r := range text {
		switch {
		case r == '\t' || r == '\n', r == 0x200C, r == 0x200D:
		case unicode.IsControl(r), unicode.Is(unicode.Cf, r),
			r >= 0xE0100 && r <= 0xE01EF:
			return i, r
		}
		i++
	}
	return -1, 0
}

// openRegular opens name inside root for reading, without blocking (a named pipe
// would wait for a writer that may never come), and refuses what is no regular file.
func openRegular(root *os.Root, name string) (*os.File, fs.FileInfo, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|nonBlock, 0)
	if err != nil {
		return nil, nil, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !info.Mode().IsRegular() {
		f.Close()
		return nil, nil, errNotRegular
	}
	return f, info, nil
}

// errNotRegular is openRegular's refusal of a directory, device, pipe or socket.
var errNotRegular = errors.New("not a regular file")

// readFile reads name inside root: a regular file of at most max bytes.
func readFile(root *os.Root, name string, max int) ([]byte, error) {
	f, info, err := openRegular(root, name)
	if errors.Is(err, errNotRegular) {
		return nil, fmt.Errorf("%s is not a regular file", name)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if info.Size() > int64(max) {
		return nil, fmt.Errorf("%s has %d bytes: the limit is %d", name, info.Size(), max)
	}
	b, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err == nil && len(b) > max {
		err = fmt.Errorf("%s has more than %d bytes: the limit is %d", name, max, max)
	}
	return b, err
}

// Skills returns the loaded skills, sorted by name.
func (s *Set) Skills() []Skill {
	if s == nil {
		return nil
	}
	return slices.Clone(s.skills)
}

// Get returns the skill with that name.
func (s *Set) Get(name string) (Skill, bool) {
	if s == nil {
		return Skill{}, false
	}
	i, ok := slices.BinarySearchFunc(s.skills, name, func(k Skill, n string) int { return strings.Compare(k.Name, n) })
	if !ok {
		return Skill{}, false
	}
	return s.skills[i], true
}

// Only returns the set of the skills names names, in the same directory with the
// same configuration: what an agent that names its skills is given. A name the set
// does not have is an error naming the skills it has.
func (s *Set) Only(names []string) (*Set, error) {
	if s == nil {
		return nil, fmt.Errorf("skills: no skills are configured (a skills directory), so %s cannot be given", strings.Join(names, ", "))
	}
	out := &Set{cfg: s.cfg}
	for _, k := range s.skills { // sorted by name, as the set's
		if slices.Contains(names, k.Name) {
			out.skills = append(out.skills, k)
		}
	}
	for _, n := range names {
		if _, ok := s.Get(n); !ok {
			return nil, fmt.Errorf("skills: unknown skill %q: %s", n, s.names(n))
		}
	}
	return out, nil
}

// maxNamed is how many skills' names an error names: all of them up to this, else
// those matching the name asked for.
const maxNamed = 50

// names lists the skills' names for an error about name, which the set lacks: all of
// them when they are few, else at most maxNamed of those whose name or description
// holds a word of name (so that a model among thousands of skills, not all listed in
// its prompt, finds them by asking load_skill for a word of its task).
func (s *Set) names(name string) string {
	if len(s.skills) == 0 {
		return "there are no skills"
	}
	if len(s.skills) <= maxNamed {
		n := make([]string, len(s.skills))
		for i, k := range s.skills {
			n[i] = k.Name
		}
		return "the skills are " + strings.Join(n, ", ")
	}
	words := searchWords(name)
	type hit struct {
		name  string
		score int
	}
	var hits []hit
	for _, k := range s.skills {
		text := k.Name + " " + strings.ToLower(cjk.Fold(k.Description))
		score := 0
		for _, w := range words {
			if strings.Contains(text, w) {
				score++
			}
		}
		if score > 0 {
			hits = append(hits, hit{k.Name, score})
		}
	}
	if len(hits) == 0 {
		return fmt.Sprintf("none of the %d skills has a word of %q in its name or description: ask load_skill again with a word of the task", len(s.skills), name)
	}
	slices.SortStableFunc(hits, func(a, b hit) int { return b.score - a.score }) // then by name, as the set
	n := make([]string, 0, min(len(hits), maxNamed))
	for _, h := range hits[:min(len(hits), maxNamed)] {
		n = append(n, h.name)
	}
	more := ""
	if len(hits) > maxNamed {
		more = fmt.Sprintf(" (the first %d of %d)", maxNamed, len(hits))
	}
	return fmt.Sprintf("of the %d skills, those with a word of %q in their names or descriptions are %s%s", len(s.skills), name, strings.Join(n, ", "), more)
}

// searchWords are the words of name that names looks for: its runs of letters and
// digits, lowercased, each run of CJK characters (Han, kana, Hangul, written without
// spaces between words) as its overlapping character pairs, so that 查询天气预报
// finds a description holding 天气预报 (a lone character stays itself). Fullwidth
// letters and digits ("ＴＯＰＩＣ４１") are their ASCII ones, halfwidth katakana
// ("ｺｰﾋｰ") the fullwidth ("コーヒー"), as in the descriptions (cjk.Fold).
func searchWords(name string) []string {
	var words []string
	name = cjk.Fold(name)
	for _, w := range strings.FieldsFunc(strings.ToLower(name), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		var run []rune
		flush := func() {
			words = cjk.AppendPairs(words, run)
			run = run[:0]
		}
		start := 0
		for i, r := range w {
			if cjk.Is(r) {
				if len(run) == 0 && i > start {
					words = append(words, w[start:i])
				}
				run = append(run, r)
				start = i + utf8.RuneLen(r)
			} else if len(run) > 0 {
				flush()
			}
		}
		flush()
		if start < len(w) {
			words = append(words, w[start:])
		}
	}
	return words
}

// MaxPromptSection bounds PromptSection, in bytes, however many skills there are
// (level 1 must not grow with them: 3,000 skills with long descriptions would
// otherwise fill a context window). Past it the descriptions are shortened, then
// left out, then the names past the bound are left out with a count, and the
// section says how to find the rest (load_skill with a word of the task).
const MaxPromptSection = 16 << 10

const (
	promptIntro = "## Skills\n\nThese skills are available. When a task matches one, call load_skill with its name to read its instructions before you act; read_skill_file reads a file its instructions refer to.\n"
	promptShort = "The list is shortened to fit: when no skill listed matches, call load_skill with a word of the task as the name and it answers with the skills that match.\n"
)

// PromptSection is level 1: the skills' names and descriptions, sorted by name, for
// the system prompt; "" when there are none. The same set gives the same bytes. It
// is at most MaxPromptSection bytes.
func (s *Set) PromptSection() string {
	if s == nil || len(s.skills) == 0 {
		return ""
	}
	full := promptIntro + "\n" + s.listing(-1)
	if len(full) <= MaxPromptSection {
		return full
	}
	head := promptIntro + promptShort + "\n"
	for _, width := range []int{200, 100, 50, 0} {
		if l := s.listing(width); len(head)+len(l) <= MaxPromptSection {
			return head + l
		}
	}
	var b strings.Builder
	b.WriteString(head)
	for i, k := range s.skills {
		line := "- " + k.Name + "\n"
		more := fmt.Sprintf("- … and %d more skills, not listed\n", len(s.skills)-i)
		if b.Len()+len(line)+len(more) > MaxPromptSection {
			b.WriteString(more)
			break
		}
		b.WriteString(line)
	}
	return b.String()
}

// listing is one line per skill: its name and its description on one line, cut to
// width characters when width is positive, left out when it is 0, whole when it is
// negative.
func (s *Set) listing(width int) string {
	var b strings.Builder
	for _, k := range s.skills {
		b.WriteString("- ")
		b.WriteString(k.Name)
		if width != 0 {
			d := strings.Join(strings.Fields(k.Description), " ")
			if width > 0 && utf8.RuneCountInString(d) > width {
				d = strings.TrimRightFunc(string([]rune(d)[:width]), unicode.IsSpace) + "…"
			}
			b.WriteString(": ")
			b.WriteString(d)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// Body is level 2: the skill's instructions (SKILL.md without its front matter), read
// from disk now, and the files of its folder that ReadFile reads: regular files, and
// symlinks to regular files inside the folder.
func (s *Set) Body(name string) (body string, files []string, err error) {
	k, ok := s.Get(name)
	if !ok {
		return "", nil, noSkill(name, s.names(name))
	}
	root, err := openFolder(k)
	if err != nil {
		return "", nil, err
	}
	defer root.Close()
	b, err := readFile(root, FileName, s.cfg.MaxSkillBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil, fmt.Errorf("skill %s: its %s is gone: it was removed or renamed after the node loaded the skills", name, FileName)
	}
	if err != nil {
		return "", nil, fmt.Errorf("skill %s: %w", name, err)
	}
	meta, body, err := parse(b)
	if err != nil {
		return "", nil, fmt.Errorf("skill %s: %s: %w", name, FileName, err)
	}
	if meta.Name != name {
		return "", nil, fmt.Errorf("skill %s: %s now names %q", name, FileName, meta.Name)
	}
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == "." || p == FileName || d.IsDir() {
			return nil // an unreadable subfolder is left out of the listing
		}
		if strings.HasPrefix(d.Name(), ".") {
			return nil
		}
		if d.Type()&fs.ModeType != 0 { // a symlink, pipe, device or socket
			if info, err := root.Stat(p); err != nil || !info.Mode().IsRegular() {
				return nil // read_skill_file would refuse it: a symlink out, a pipe, …
			}
		}
		if len(files) == maxListed {
			files = append(files, "…")
			return fs.SkipAll
		}
		files = append(files, p)
		return nil
	})
	return body, files, err
}

// ReadFile is level 3: the file at path (relative to the skill's folder) of skill
// name, at most MaxOutputBytes of it, with a note when it was cut. The path may not
// leave the folder, by "..", an absolute path or a symlink.
func (s *Set) ReadFile(name, path string) (string, error) {
	k, ok := s.Get(name)
	if !ok {
		return "", noSkill(name, s.names(name))
	}
	rel, err := confine(path)
	if err != nil {
		return "", err
	}
	root, err := openFolder(k)
	if err != nil {
		return "", err
	}
	defer root.Close()
	f, info, err := openRegular(root, rel)
	switch {
	case errors.Is(err, errNotRegular):
		return "", lookupError{fmt.Sprintf("skill %s: %q is not a regular file", name, path), fs.ErrInvalid}
	case errors.Is(err, fs.ErrNotExist):
		return "", lookupError{fmt.Sprintf("skill %s has no file %q", name, path), fs.ErrNotExist}
	case err != nil:
		return "", fmt.Errorf("skill %s: %q: %w", name, path, stripRoot(err))
	}
	defer f.Close()
	max := s.cfg.MaxOutputBytes
	b, err := io.ReadAll(io.LimitReader(f, int64(max)))
	if err != nil {
		return "", err
	}
	if !utf8.Valid(b) && !utf8.Valid(trimPartialRune(b)) {
		return "", fmt.Errorf("skill %s: %q is a binary file of %d bytes; it cannot be shown as text", name, path, info.Size())
	}
	return cut(string(trimPartialRune(b)), info.Size()), nil
}

// lookupError is the refusal of a skill or a file that is not there (kind
// fs.ErrNotExist) or of a path that names no file of a skill's folder (kind
// fs.ErrInvalid): errors.Is tells them apart from a failure to read (the MCP
// server answers a client's resources/read with the code each one has).
type lookupError struct {
	msg  string
	kind error
}

func (e lookupError) Error() string { return e.msg }
func (e lookupError) Unwrap() error { return e.kind }

// noSkill is the refusal of a skill name that the set does not have; names is
// s.names(name).
func noSkill(name, names string) error {
	return lookupError{fmt.Sprintf("no skill is named %q; %s", name, names), fs.ErrNotExist}
}

// confine checks a model-given path relative to a skill's folder.
func confine(path string) (string, error) {
	switch {
	case strings.TrimSpace(path) == "":
		return "", lookupError{"the path is empty: give a file of the skill's folder, e.g. references/guide.md", fs.ErrInvalid}
	case filepath.IsAbs(path) || strings.HasPrefix(path, "/") || strings.HasPrefix(path, `\`):
		return "", lookupError{fmt.Sprintf("the path %q is absolute: give it relative to the skill's folder", path), fs.ErrInvalid}
	case slices.Contains(strings.FieldsFunc(path, func(r rune) bool { return r == '/' || r == '\\' }), ".."):
		return "", lookupError{fmt.Sprintf("the path %q leaves the skill's folder: \"..\" is not allowed", path), fs.ErrInvalid}
	}
	return filepath.Clean(path), nil
}

// openFolder opens the folder of skill k. Its errors name the skill, not the
// folder's path on the node's disk (which the model and the session's events
// would otherwise be told).
func openFolder(k Skill) (*os.Root, error) {
	root, err := os.OpenRoot(k.Dir)
	var pe *fs.PathError
	switch {
	case err == nil:
		return root, nil
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("skill %s: its folder is gone: it was removed or renamed after the node loaded the skills", k.Name)
	case errors.As(err, &pe):
		return nil, fmt.Errorf("skill %s: its folder cannot be opened: %w", k.Name, pe.Err)
	}
	return nil, fmt.Errorf("skill %s: %w", k.Name, err)
}

// stripRoot turns os.Root's escape error into words for the model.
// pathless is err without the path an *fs.PathError repeats (its Problem names it).
func pathless(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	}
	return err
}

func stripRoot(err error) error {
	if strings.Contains(err.Error(), "escapes") {
		return errors.New("it leads out of the skill's folder (a symlink), which is not allowed")
	}
	return err
}

// trimPartialRune drops an incomplete UTF-8 sequence at the end of b (a cut in the
// middle of a character).
func trimPartialRune(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && len(b) > 0; i++ {
		if utf8.Valid(b) {
			return b
		}
		b = b[:len(b)-1]
	}
	return b
}

// cut appends a note when text is a head of size bytes.
func cut(text string, size int64) string {
	if int64(len(text)) >= size {
		return text
	}
	return fmt.Sprintf("%s\n[cut: showing the first %d of %d bytes]", text, len(text), size)
}

// limitedBuffer keeps the first max bytes written to it and counts the rest.
type limitedBuffer struct {
	buf   bytes.Buffer
	max   int
	total int64
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.total += int64(len(p))
	if room := l.max - l.buf.Len(); room > 0 {
		l.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string {
	return cut(string(trimPartialRune(l.buf.Bytes())), l.total)
}

// ReadBytes is the file at path (relative to the skill's folder) of skill name, whole
// and as bytes (text or binary), for a client that shows it as it is (the MCP
// server's skill:// resources). The path is confined like ReadFile's; a file larger
// than max bytes is refused. A skill or a file that is not there is refused with an
// error that answers errors.Is(err, fs.ErrNotExist), a path that names no file of
// the folder (empty, absolute, leaving it, a directory) with one answering
// fs.ErrInvalid, as ReadFile's and Body's.
func (s *Set) ReadBytes(name, path string, max int64) ([]byte, error) {
	k, ok := s.Get(name)
	if !ok {
		return nil, noSkill(name, s.names(name))
	}
	rel, err := confine(path)
	if err != nil {
		return nil, err
	}
	root, err := openFolder(k)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, info, err := openRegular(root, rel)
	switch {
	case errors.Is(err, errNotRegular):
		return nil, lookupError{fmt.Sprintf("skill %s: %q is not a regular file", name, path), fs.ErrInvalid}
	case errors.Is(err, fs.ErrNotExist):
		return nil, lookupError{fmt.Sprintf("skill %s has no file %q", name, path), fs.ErrNotExist}
	case err != nil:
		return nil, fmt.Errorf("skill %s: %q: %w", name, path, stripRoot(err))
	}
	defer f.Close()
	if info.Size() > max {
		return nil, fmt.Errorf("skill %s: %q has %d bytes, more than the %d a resource may have", name, path, info.Size(), max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("skill %s: %q grew past the %d bytes a resource may have", name, path, max)
	}
	return b, nil
}
