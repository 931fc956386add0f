/* The cost of the syscalls readyprism makes per connection beyond HAProxy's (benches/README.md,
 * "The misses"): setsockopt of TCP_NODELAY, TCP_KEEPIDLE and TCP_USER_TIMEOUT, an eventfd
 * write (a timer that wakes tokio's driver) and the epoll_wait that returns it, each timed over
 * 200 000 calls. Not a cargo target:
 *     cc -O2 -o /tmp/syscall_cost benches/proxy/syscall_cost.c && /tmp/syscall_cost
 */
#include <stdio.h>
#include <time.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <sys/epoll.h>
#include <unistd.h>
#include <stdint.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
int main(){
  int N=200000; int s=socket(AF_INET,SOCK_STREAM|SOCK_NONBLOCK,0); int v=1;
  double t=now(); for(int i=0;i<N;i++){setsockopt(s,IPPROTO_TCP,TCP_NODELAY,&v,sizeof v);} double a=(now()-t)/N;
  int idle=30; t=now(); for(int i=0;i<N;i++){setsockopt(s,IPPROTO_TCP,TCP_KEEPIDLE,&idle,sizeof idle);} double b=(now()-t)/N;
  int ut=10000; t=now(); for(int i=0;i<N;i++){setsockopt(s,IPPROTO_TCP,TCP_USER_TIMEOUT,&ut,sizeof ut);} double c=(now()-t)/N;
  int e=eventfd(0,EFD_NONBLOCK); uint64_t one=1; int ep=epoll_create1(0); struct epoll_event ev={.events=EPOLLIN|EPOLLET}; epoll_ctl(ep,EPOLL_CTL_ADD,e,&ev);
  t=now(); for(int i=0;i<N;i++){write(e,&one,8);} double d=(now()-t)/N;
  struct epoll_event out[8]; t=now(); for(int i=0;i<N;i++){write(e,&one,8); epoll_wait(ep,out,8,0);} double f=(now()-t)/N - d;
  t=now(); for(int i=0;i<N;i++){epoll_wait(ep,out,8,0);} double g=(now()-t)/N;
  printf("setsockopt NODELAY %.0f ns, KEEPIDLE %.0f ns, USER_TIMEOUT %.0f ns; eventfd write %.0f ns; epoll_wait returning the eventfd %.0f ns, empty %.0f ns\n",a,b,c,d,f,g);
}
