/* kiln doctor (tools/doctor.c). */
#ifndef KILN_DOCTOR_CMD_H
#define KILN_DOCTOR_CMD_H

int kl_doctor_main(int argc, char **argv);

#endif
