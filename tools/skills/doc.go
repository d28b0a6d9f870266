// Package skills loads Agent Skills and offers them to an agent in three levels.
//
// A skill is a folder holding SKILL.md: YAML front matter with a name (the folder's
// name: lowercase letters, digits and hyphens) and a description, then a Markdown body
// of instructions; beside it, optionally, scripts/, references/ and assets/. Load reads
// every such folder of a skills directory.
//
//   - Level 1: Set.PromptSection lists every skill's name and description, sorted by
//     name, for the system prompt. It is byte-identical from request to request.
//   - Level 2: the load_skill tool returns a skill's body, and the files of its folder,
//     when the model asks for it.
//   - Level 3: the read_skill_file tool returns one file of a skill's folder, and the
//     run_skill_script tool runs one of its scripts/ — only when Config.AllowScripts is
//     set, with a timeout, in the skill's folder, with a minimal environment (no API
//     keys), its process group killed when it runs out of time.
//
// Files are opened through os.Root on the skill's folder: a path with "..", an
// absolute path, or a symlink that leads out of the folder is refused, as are device
// files and other non-regular files. Output returned to the model is cut at
// Config.MaxOutputBytes with a note saying how much was cut.
//
// A bad skill does not stop the others: a folder without SKILL.md, with front matter
// that is missing or malformed, a name that is not its folder's, a blank or overlong
// description or one holding control characters or bidirectional overrides, or a SKILL.md over Config.MaxSkillBytes is skipped, and Load returns a
// *Problem naming the file and the reason for each. Load fails only when the skills
// directory itself cannot be read.
//
// The tools are ordinary tools.Tool values: each call is an effect recorded by the
// session like any other. Their source (tools list) is "builtin": they are the
// machinery every skill goes through, always offered whatever the disclosure strategy.
package skills
