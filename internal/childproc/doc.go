// Package childproc starts the long-lived child processes of a node (stdio MCP
// servers, skill scripts) so that they do not outlive it. A node stopped cleanly
// ends them itself; one killed with SIGKILL (or by the OOM killer) cannot, and a
// child that does not notice its stdin close would run on as an orphan. On Linux,
// Start asks the kernel to send the child SIGTERM when the node dies
// (PR_SET_PDEATHSIG); elsewhere it is exec.Cmd.Start.
package childproc
