/* Links the no_std staticlib into a C program and runs its check: 3 doorbells written and one
 * command timed out on the injected clock give 103. */
#include <stdio.h>

unsigned pvrdma_no_std_check(void);

int main(void)
{
	unsigned r = pvrdma_no_std_check();

	printf("no_std check: %u (expected 103)\n", r);
	return r == 103 ? 0 : 1;
}
