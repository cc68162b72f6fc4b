/* kiln ckpt and kiln export (tools/ckpt.c). */
#ifndef KILN_CKPT_TOOL_H
#define KILN_CKPT_TOOL_H

/* cmd is "ckpt" or "export"; argv holds the arguments after it. Returns
 * the exit status. */
int kl_ckpt_tool_main(const char *cmd, int argc, char **argv);

#endif
